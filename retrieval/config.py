"""The `retrieval` section of params.yaml: ``RetrievalConfig`` (with ``TranslateSearchConfig``), and the names of
its runs (:func:`run_name`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from common.checks import SettingError, check_not_empty, check_range
from retrieval.inference import EvaluationConfig
from retrieval.losses import RankingLoss
from retrieval.roles import PLACEHOLDERS, PRESETS, LanguageRole, ResolvedRole, check_role_name
from retrieval.train import TrainConfig
from retrieval.vocab import VocabConfig
from retrieval.zoo.registry import MODELS, make_config


def run_name(model: str, variant: str, role: str) -> str:
    """``<model>-<variant>-<role>``: a retrieval run, its stage ``train_retrieval@<run>``, metrics ``<run>.json``."""
    return f"{model}-{variant}-{role}"


@dataclass(frozen=True)
class TranslateSearchConfig:
    languages: tuple[str, ...] = ()  # queries in these languages are translated to the pivot by the MT system


@dataclass(frozen=True)
class RetrievalConfig:
    """The `retrieval` section of params.yaml.

    Attributes:
        models: Registry names or ``aliases``; every model x variant x role is one training run.
        variants: Caption variants (`augment`'s output): presets of ``mmt.augment`` or ``augment.custom_variants``.
        languages: The caption languages the runs draw on (a role's ``targets`` are those other than the pivot).
        roles: Language roles, one run each: names of :data:`~retrieval.roles.PRESETS` or of ``custom_roles``.
        custom_roles: Roles of your own, by name.
        train_kinds: Human caption kinds used for training (comparable: Multi30K task 2 style).
        configs: Model -> its config dataclass (fields not set keep the paper's defaults).
        aliases: Run names for a registry model with settings of its own, so that one model can run twice in one
            experiment: ``{multihead_nodiv: {model: multihead, diversity_weight: 0}}`` trains ``multihead`` with
            ``configs.multihead`` and the fields given over it, under the name ``multihead_nodiv``.
        vocab: The word vocabulary.
        objective: The ranking loss.
        train: The schedule.
        evaluation: How validation and test splits are scored.
        translate_search: Table 5's translated queries.
        replicates: Training runs per model x variant x role, seeded ``seed``, ``seed + 1``, ...: the metrics file
            holds their mean in the usual schema, ``std`` (the sample standard deviation, same keys) and ``seeds``.
    """

    models: tuple[str, ...] = ("san",)
    variants: tuple[str, ...] = ("none",)
    languages: tuple[str, ...] = ("en",)
    roles: tuple[str, ...] = ("all",)
    custom_roles: dict[str, LanguageRole] = field(default_factory=dict)
    train_kinds: tuple[str, ...] = ("comparable",)
    configs: dict[str, Any] = field(default_factory=dict)
    aliases: dict[str, dict[str, Any]] = field(default_factory=dict)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    objective: RankingLoss = field(default_factory=RankingLoss)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    translate_search: TranslateSearchConfig = field(default_factory=TranslateSearchConfig)
    replicates: int = 1

    def __post_init__(self) -> None:
        check_not_empty("models", self.models, "model")
        check_range("replicates", self.replicates, 1, 100)
        for index, name in enumerate(self.models):
            if name not in MODELS and name not in self.aliases:
                names = ", ".join((*MODELS, *self.aliases))
                raise SettingError(f"models[{index}]", f"unknown name {name!r}; known: {names}")
        check_not_empty("variants", self.variants, "variant")
        check_not_empty("languages", self.languages, "language")
        check_not_empty("roles", self.roles, "role")
        for name in self.custom_roles:
            check_role_name(f"custom_roles.{name}", name)
            if name in PRESETS:
                raise SettingError(f"custom_roles.{name}", f"a preset has this name; presets: {', '.join(PRESETS)}")
            role = self.custom_roles[name]
            train_codes = [selector.partition(":")[0] for selector in role.train]
            for part, codes in (("train", train_codes), ("test", role.test)):
                for index, code in enumerate(codes):
                    if code not in (*PLACEHOLDERS, *self.languages):
                        message = f"{code!r} is not one of retrieval.languages {list(self.languages)}"
                        raise SettingError(f"custom_roles.{name}.{part}[{index}]", message)
            for code in role.setup.low_resource:
                if code not in self.languages:
                    message = f"{code!r} is not one of retrieval.languages {list(self.languages)}"
                    raise SettingError(f"custom_roles.{name}.setup.low_resource.{code}", message)
            if role.setup.disjoint and role.setup.c2c_probability is None and self.train.c2c_probability > 0:
                message = (
                    "disjoint images have no caption pairs for train.c2c_probability; set setup.c2c_probability: 0"
                )
                raise SettingError(f"custom_roles.{name}.setup.disjoint", message)
        known = [*PRESETS, *self.custom_roles]
        for index, name in enumerate(self.roles):
            if name not in known:
                raise SettingError(f"roles[{index}]", f"unknown role {name!r}; known: {', '.join(known)}")
        for name in self.objective.per_model:
            if name not in MODELS:
                raise SettingError(f"objective.per_model.{name}", f"unknown model; known: {', '.join(MODELS)}")
        for index, kind in enumerate(self.train_kinds):
            if kind not in ("comparable", "translation"):
                raise SettingError(f"train_kinds[{index}]", f"got {kind!r}, allowed: comparable, translation")
        typed: dict[str, Any] = {}
        for name, values in self.configs.items():
            if name not in MODELS:
                raise SettingError(f"configs.{name}", f"unknown model; known: {', '.join(MODELS)}")
            if isinstance(values, MODELS[name].config_type):  # built already (Prefect re-validates flow parameters)
                typed[name] = values
            elif isinstance(values, Mapping):
                typed[name] = make_config(name, values, path=f"configs.{name}")
            else:
                raise SettingError(f"configs.{name}", f"expected a mapping of settings, got {values!r}")
        object.__setattr__(self, "configs", typed)  # frozen: the typed configs replace the mappings once, here
        for name, entry in self.aliases.items():
            check_role_name(f"aliases.{name}", name)  # a run name's part: no hyphen
            if name in MODELS:
                raise SettingError(f"aliases.{name}", "a registry model has this name")
            if entry.get("model") not in MODELS:
                message = f"expected model: one of {', '.join(MODELS)}, got {entry.get('model')!r}"
                raise SettingError(f"aliases.{name}.model", message)
            self.model_config(name)  # its fields over the model's config: unknown keys and bad values named
        for lang in self.vocab.fasttext:
            if lang not in self.languages:
                raise SettingError(f"vocab.fasttext.{lang}", f"not one of retrieval.languages {list(self.languages)}")

    def run_names(self) -> list[str]:
        """``<model>-<variant>-<role>`` of every run, in the order of the settings (the stages
        ``train_retrieval@<run>`` and their metrics files ``<run>.json``)."""
        return [
            run_name(model, variant, role) for model in self.models for variant in self.variants for role in self.roles
        ]

    def caption_languages(self) -> tuple[str, ...]:
        """The caption languages a run reads: ``languages`` and translate-search's query languages."""
        return tuple(dict.fromkeys((*self.languages, *self.translate_search.languages)))

    def role(self, name: str, pivot: str) -> ResolvedRole:
        """The language role ``name`` over concrete codes (``pivot``; ``targets``: the other ``languages``).

        Raises:
            SettingError: the role reaches a language that is not one of ``languages``.
        """
        role = self.custom_roles.get(name) or PRESETS[name]
        resolved = role.resolve(pivot, self.languages)
        for code in (*resolved.train_languages, *resolved.test):
            if code not in self.languages:
                raise SettingError(
                    f"roles.{name}", f"reaches {code!r}, not one of retrieval.languages {list(self.languages)}"
                )
        return resolved

    def registry_model(self, name: str) -> str:
        """The registry model a run's model name (a registry name or an alias) trains."""
        return str(self.aliases[name]["model"]) if name in self.aliases else name

    def model_config(self, name: str) -> Any:
        """The config dataclass of model ``name``: the configured one, or the paper's defaults; for an alias, its
        model's with the alias's fields over it."""
        if name in self.aliases:
            model = self.registry_model(name)
            own = {key: value for key, value in self.aliases[name].items() if key != "model"}
            return make_config(model, asdict(self.model_config(model)) | own, path=f"aliases.{name}")
        return self.configs[name] if name in self.configs else make_config(name, {})
