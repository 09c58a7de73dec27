"""Paper-style results tables from the retrieval metrics files, as Markdown and as a small HTML page.

Rows are model x variant x language role, columns R@1/5/10 of text->image and image->text per language, plus
rsum (like Tables 1-4 of Huang et al. 2020). The HTML page adds the rsum chart and, for a few train images, a human
caption with what the text-only MT and the MMT synthesized from it, side by side. Variants are shown by the labels
the caller passes (the paper's notation, e.g. ``MMT(f+b)``), rows in the order of those labels; a run of a variant
without a label shows its name, after the labelled ones.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

KS = (1, 5, 10)
# the columns of a sample on the page: the text-only system, then the multimodal one (the `origin` column)
SAMPLED_ORIGINS = {"mt": "MT (text-only)", "mmt": "MMT (with the image)"}

Chain = tuple[tuple[str, str], ...]  # (label, text) of each caption, hop after hop


@dataclass(frozen=True)
class Sample:
    """An image, one of its human captions, and per system kind the captions synthesized from that caption.

    Attributes:
        image_id: The image.
        png: Its thumbnail.
        human: (label, text) of the human caption, e.g. ("human en", "A red circle.").
        chains: (origin, its chain) for each origin of :data:`SAMPLED_ORIGINS` that translated the caption, in
            that order.
    """

    image_id: str
    png: bytes
    human: tuple[str, str]
    chains: tuple[tuple[str, Chain], ...]


def split_run(name: str) -> tuple[str, str, str]:
    """``san-mmt_f-all`` -> (``san``, ``mmt_f``, ``all``): model, variant and role names have no hyphen."""
    parts = name.split("-")
    if len(parts) != 3:
        raise ValueError(f"{name!r} is not a run name <model>-<variant>-<role>")
    model, variant, role = parts
    return model, variant, role


def _run_order(variant_labels: Mapping[str, str]) -> Callable[[str], tuple[str, int, str]]:
    """Sort key of run names: by model, then variant in the order of ``variant_labels`` (others last), then role."""
    positions = {variant: index for index, variant in enumerate(variant_labels)}

    def key(name: str) -> tuple[str, int, str]:
        model, variant, role = split_run(name)
        return model, positions.get(variant, len(positions)), role

    return key


def languages_of(results: Mapping[str, Mapping[str, Any]], pivot: str | None = None) -> list[str]:
    """The language keys of the metrics (``en``, ``en-folds``, ...), the pivot's first, then in order of appearance."""
    langs: list[str] = []
    for metrics in results.values():
        langs += [key for key, value in metrics.items() if isinstance(value, dict) and "t2i" in value]
    unique = list(dict.fromkeys(langs))
    return sorted(unique, key=lambda key: key.partition("-")[0] != pivot)  # stable: the pivot's keys first


@dataclass(frozen=True)
class ReportContext:
    """What the tables say around the numbers.

    Attributes:
        pivot: The pivot language: its tables come first.
        test_images: Images each test language is ranked against (``<lang>-folds``: one fold's), for the chance
            line under each table; absent keys get none.
        header: Lines under the title (the run's commit, date and key settings).
    """

    pivot: str | None = None
    test_images: Mapping[str, int] = field(default_factory=dict)
    header: Sequence[str] = ()


LEGEND = ("Variants: `-` the human captions alone; MT(f) / MMT(f) adds the target-language captions the text-only "
          "MT / the multimodal MMT translated from them (forward); (f+b) adds those translated back into the pivot "
          "too; (f+b; hop 2) the back-translations alone. Roles: which captions a run trains on and which languages "
          "it is tested on (README, Language roles). mR = rsum / 6. Δ rsum: against the same model and role "
          "trained on `-` (human captions alone).")  # fmt: skip


def chance_line(images: int) -> str:
    """Text-to-image recall of a ranking that ignores the query: R@K = K / N."""
    recalls = ", ".join(f"R@{k} {min(100.0, 100.0 * k / images):.1f}" for k in KS)
    return f"Chance (text->image, {images} images): {recalls}."


def language_rows(results: Mapping[str, Mapping[str, Any]], lang: str) -> dict[str, dict[str, Any]]:
    """Run name -> the metrics of ``lang`` (its key ``std`` the replicates' standard deviations, when there are)."""
    rows = {}
    for name, metrics in results.items():
        if lang in metrics:
            spread = metrics.get("std", {}).get(lang)
            rows[name] = {**metrics[lang], **({"std": spread} if spread else {})}
    return rows


def results_markdown(results: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str],
                     context: ReportContext = ReportContext()) -> str:  # fmt: skip
    """One table per language (the pivot's first; then per translate-search language), rows sorted by model,
    variant, role, each with its chance level; the legend and ``context.header`` above them.

    Args:
        results: Run name (``<model>-<variant>-<role>``) -> its metrics.
        variant_labels: Variant name -> how the tables show it, in the order of their rows.
        context: The pivot, the test images per language and the header lines.
    """
    lines = ["# Retrieval results", "", *context.header, *([""] if context.header else []),
             "Test split, recall in percent (R@K), rsum = the six recalls summed; runs of several seeds show mean ± "
             "sample standard deviation.", "", LEGEND, ""]  # fmt: skip
    for lang in languages_of(results, context.pivot):
        rows = language_rows(results, lang)
        lines += [f"## {_heading(lang)}", "", *_table(rows, variant_labels), ""]
        if lang in context.test_images:
            lines += [chance_line(context.test_images[lang]), ""]
    for lang, rows in translate_search_rows(results).items():
        lines += [f"## {_search_heading(lang)}", "", *_table(rows, variant_labels), ""]
    return "\n".join(lines)


def translate_search_rows(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Table 5 of the paper: query language -> run name -> the metrics of that language's queries translated into the
    pivot and searched with the run's model (with their ``std`` over replicates, when there are), languages sorted."""
    searched = {name: {**m["translate_search"], **({"std": m["std"]["translate_search"]} if "std" in m else {})}
                for name, m in results.items() if "translate_search" in m}  # fmt: skip
    langs = sorted({lang for per_lang in searched.values() for lang in per_lang if lang != "std"})
    return {lang: language_rows(searched, lang) for lang in langs}


def _search_heading(lang: str) -> str:
    return f"translate-search: {lang} queries translated to the pivot (Table 5)"


def diversity_markdown(
    diversity: Mapping[str, Mapping[str, Any]],
    round_trips: Mapping[str, Mapping[str, Mapping[str, Any]]],
    variant_labels: Mapping[str, str],
) -> list[str]:
    """Section 4.3's measures: distinct tokens and bigrams per variant and language (train split), and per target
    language, system and hop the share of round-trip captions that differ from their source.

    Args:
        diversity: ``augment``'s metrics: variant -> {"token_types": {lang: n}, "bigrams": {lang: n}}.
        round_trips: Target language -> ``synthesize``'s metrics: system -> hop -> {"captions", "changed",
            "token_types", "new_types"} (the last two absent in metrics from before they were recorded).
        variant_labels: Variant name -> how the tables show it, in the order of their rows.
    """
    lines: list[str] = []
    if diversity:
        order = {name: index for index, name in enumerate(variant_labels)}
        lines += ["## Caption diversity (train split)", "", "| variant | language | token types | bigrams |",
                  "|---|---|---|---|"]  # fmt: skip
        for variant in sorted(diversity, key=lambda name: (order.get(name, len(order)), name)):
            counts = diversity[variant]
            for lang in sorted(counts["token_types"]):
                label = variant_labels.get(variant, variant)
                lines.append(f"| {label} | {lang} | {counts['token_types'][lang]} | {counts['bigrams'][lang]} |")
        lines.append("")
    rows = [(target, system, hop, numbers) for target, systems in sorted(round_trips.items())
            for system, hops in sorted(systems.items()) for hop, numbers in sorted(hops.items())]  # fmt: skip
    if rows:
        lines += ["## Round trips that changed their source", "",
                  "| target | system | hop | captions | changed (%) | token types | new token types |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for target, system, hop, numbers in rows:
            lines.append(f"| {target} | {system} | {hop.removeprefix('hop')} | {numbers['captions']} | "
                         f"{100 * numbers['changed']:.1f} | {numbers.get('token_types', '-')} | "
                         f"{numbers.get('new_types', '-')} |")  # fmt: skip
        lines.append("")
    return lines


def translation_markdown(translation: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The translation systems' test scores: BLEU (lowercased, tokenised), chrF, METEOR 1.5 (``-`` where it could not
    run; the metrics file says why, and which modules ran), the MMT's image awareness and, where
    the corpus records them, the image-dependent words found, BLEU on the sentences that have such words, and the
    contrastive accuracy (a text-only system scores 50). ``-`` where a value does not apply or was not recorded.

    Args:
        translation: System folder name (``mmt-en-de``) -> its ``train_mmt`` metrics.
    """
    if not translation:
        return []
    lines = ["## Translation (test captions)", "",
             "| system | BLEU | chrF | METEOR | image awareness | image-dependent words (%) | "
             "BLEU, sentences with them | contrastive (%) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in sorted(translation):
        metrics = translation[name]
        words, contrastive = metrics.get("image_dependent"), metrics.get("contrastive")  # absent in older files
        cells = [name, _cell(metrics["bleu"]), _cell(metrics["chrf"]), _cell(metrics.get("meteor")),
                 _cell(metrics.get("image_awareness")),
                 _cell(100 * words["word_accuracy"] if isinstance(words, dict) else None),
                 _cell(words["bleu"] if isinstance(words, dict) else None),
                 _cell(100 * contrastive["accuracy"] if isinstance(contrastive, dict) else None)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _with_std(mean: float, std: float | None) -> str:
    return f"{mean:.1f}" if std is None else f"{mean:.1f} ± {std:.1f}"


def _heading(key: str) -> str:
    """``en`` -> ``en``; ``en-folds`` (the ``both`` protocol) -> ``en, mean over test folds``."""
    lang, _, folds = key.partition("-")
    return f"{lang}, mean over test folds" if folds == "folds" else key


def _table(rows: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str]) -> list[str]:
    header = ["model", "variant", "role", *[f"t2i R@{k}" for k in KS], *[f"i2t R@{k}" for k in KS], "rsum", "mR",
              "Δ rsum"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in sorted(rows, key=_run_order(variant_labels)):
        metrics = rows[name]
        model, variant, role = split_run(name)
        cells = [model, variant_labels.get(variant, variant), role]
        spread = metrics.get("std")
        cells += [_with_std(metrics[direction][f"r{k}"], spread[direction][f"r{k}"] if spread else None)
                  for direction in ("t2i", "i2t") for k in KS]  # fmt: skip
        cells.append(_with_std(metrics["rsum"], spread["rsum"] if spread else None))
        cells.append(f"{metrics['rsum'] / 6:.1f}")
        baseline = rows.get(f"{model}-none-{role}")
        cells.append("-" if baseline is None or variant == "none" else f"{metrics['rsum'] - baseline['rsum']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def results_html(
    results: Mapping[str, Mapping[str, Any]],
    samples: Sequence[Sample],
    variant_labels: Mapping[str, str],
    extra_sections: Sequence[str] = (),
    context: ReportContext = ReportContext(),
) -> str:
    """A self-contained page: the header and legend, the tables (the pivot's first) with their chance levels and an
    rsum bar chart each, the translate-search tables (Table 5) with theirs, ``extra_sections`` (Markdown lines of
    ``## `` headings and tables, e.g. :func:`diversity_markdown`) and synthesized-caption samples."""
    body = ["<h1>Retrieval results</h1>", *(f"<p>{html.escape(line)}</p>" for line in context.header),
            f"<p>{html.escape(LEGEND)}</p>"]  # fmt: skip
    for lang in languages_of(results, context.pivot):
        rows = language_rows(results, lang)
        body += [f"<h2>{html.escape(_heading(lang))}</h2>", _html_table(rows, variant_labels)]
        if lang in context.test_images:
            body.append(f"<p>{html.escape(chance_line(context.test_images[lang]))}</p>")
        body.append(_rsum_chart(rows, variant_labels, title=f"rsum per run, {_heading(lang)}"))
    for lang, rows in translate_search_rows(results).items():
        title = f"rsum per run, {lang} queries translated to the pivot"
        body += [f"<h2>{html.escape(_search_heading(lang))}</h2>", _html_table(rows, variant_labels),
                 _rsum_chart(rows, variant_labels, title=title)]  # fmt: skip
    body += _markdown_html(extra_sections)
    if samples:
        body.append("<h2>Synthesized captions</h2>")
        body += [_sample_html(sample) for sample in samples]
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}.sample{display:flex;gap:1em;margin:1em 0}"
             ".sample img{width:160px;height:160px}.sample td{text-align:left;vertical-align:top}")  # fmt: skip
    return f"<!doctype html><html><head><meta charset='utf-8'><title>Retrieval results</title><style>{style}</style>" \
           f"</head><body>{''.join(body)}</body></html>\n"  # fmt: skip


def _markdown_html(lines: Sequence[str]) -> list[str]:
    """``## `` headings and pipe tables (header, rule, rows) as HTML."""
    parts: list[str] = []
    table: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            parts.append(_table_html(table))
            table = []
        if line.startswith("## "):
            parts.append(f"<h2>{html.escape(line[3:])}</h2>")
    return parts


def _html_table(rows: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str]) -> str:
    return _table_html(_table(rows, variant_labels))


def _table_html(lines: Sequence[str]) -> str:
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    out = ["<table><tr>" + "".join(f"<th>{html.escape(cell)}</th>" for cell in header) + "</tr>"]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        out.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    return "".join(out) + "</table>"


def _rsum_chart(rows: Mapping[str, Mapping[str, Any]], variant_labels: Mapping[str, str], *, title: str) -> str:
    """Horizontal bars of rsum on a 0-600 axis, one per run in the table's order, as inline SVG with a title and
    an axis."""
    names = sorted(rows, key=_run_order(variant_labels))
    top, left, scale = 24, 230, 0.5  # 600 rsum -> 300 px
    height = top + 22 * len(names) + 34
    parts = [f'<text x="{left}" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for index, name in enumerate(names):
        model, variant, role = split_run(name)
        rsum = float(rows[name]["rsum"])
        y = top + 22 * index
        label = f"{model} {variant_labels.get(variant, variant)} {role}"
        end = left + rsum * scale
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{html.escape(label)}</text>'
                     f'<rect x="{left}" y="{y}" width="{rsum * scale:.1f}" height="16" fill="#4a7ab8"/>'
                     f'<text x="{end + 5:.1f}" y="{y + 13}" font-size="11">{rsum:.1f}</text>')  # fmt: skip
    axis = top + 22 * len(names) + 4
    parts.append(f'<line x1="{left}" y1="{axis}" x2="{left + 600 * scale}" y2="{axis}" stroke="#333"/>')
    for tick in range(0, 601, 100):
        x = left + tick * scale
        parts.append(f'<line x1="{x}" y1="{axis}" x2="{x}" y2="{axis + 4}" stroke="#333"/>'
                     f'<text x="{x}" y="{axis + 16}" font-size="10" text-anchor="middle">{tick}</text>')  # fmt: skip
    parts.append(f'<text x="{left + 300 * scale}" y="{axis + 29}" font-size="11" text-anchor="middle">'
                 f"rsum (of 600)</text>")  # fmt: skip
    return f'<svg width="{left + 360}" height="{height}" role="img" aria-label="{html.escape(title)}">' \
           f'{"".join(parts)}</svg>'  # fmt: skip


def _sample_html(sample: Sample) -> str:
    """The image, its human caption, then one column per system with its captions hop after hop."""
    image = base64.b64encode(sample.png).decode()
    label, text = sample.human
    heads = "".join(f"<th>{html.escape(SAMPLED_ORIGINS[origin])}</th>" for origin, _ in sample.chains)
    cells = "".join(
        "<td><ul>"
        + "".join(f"<li><b>{html.escape(hop)}</b>: {html.escape(words)}</li>" for hop, words in chain)
        + "</ul></td>"
        for _, chain in sample.chains
    )
    return (f'<div class="sample"><img src="data:image/png;base64,{image}" alt="{html.escape(sample.image_id)}">'
            f"<div><p><b>{html.escape(label)}</b>: {html.escape(text)}</p>"
            f"<table><tr>{heads}</tr><tr>{cells}</tr></table></div></div>")  # fmt: skip


def sample_captions(synthesized: Sequence[Path], prepared: Path, images: Path, count: int) -> list[Sample]:
    """The first ``count`` train images (in the prepared table's order) one of whose human captions was translated,
    each with that caption and, per system kind (text-only MT, MMT), the chain of captions translated from it.

    Args:
        synthesized: The `synthesize` stage's caption files (one per target language; missing ones are skipped).
        prepared: The target corpus's prepared folder (its human captions and image paths).
        images: The folder the image paths are relative to.
        count: How many images.
    """
    files = [path for path in synthesized if path.is_file()]
    if not files or count == 0:
        return []
    made = [row for path in files for row in pq.read_table(path).to_pylist() if row["split"] == "train"]
    children: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(made, key=lambda row: (row["hop"], row["lang"], row["system"])):
        children.setdefault(row["parent_id"], []).append(row)
    human = pq.read_table(prepared / "captions.parquet")
    human = human.filter(pc.and_(pc.equal(human["split"], "train"), pc.equal(human["origin"], "human")))
    paths = {row["image_id"]: row["path"] for row in pq.read_table(prepared / "images.parquet").to_pylist()}
    samples: list[Sample] = []
    shown: set[str] = set()
    for source in human.to_pylist():
        if source["image_id"] in shown or source["caption_id"] not in children:
            continue
        chains = tuple(
            (origin, chain)
            for origin in SAMPLED_ORIGINS
            if (chain := _descendants(source["caption_id"], children, origin))
        )
        label = ("human " + source["lang"], source["text"])
        samples.append(Sample(source["image_id"], thumbnail(images / paths[source["image_id"]]), label, chains))
        shown.add(source["image_id"])
        if len(samples) == count:
            break
    return samples


def _descendants(parent_id: str, children: Mapping[str, Sequence[dict[str, Any]]], origin: str) -> Chain:
    """(label, text) of every caption of ``origin`` translated from ``parent_id``, each followed by its own."""
    chain: list[tuple[str, str]] = []
    for child in (c for c in children.get(parent_id, ()) if c["origin"] == origin):
        chain.append((f"{child['system']} hop {child['hop']} {child['lang']}", child["text"]))
        chain += _descendants(child["caption_id"], children, origin)
    return tuple(chain)


def thumbnail(path: Path, size: int = 160) -> bytes:
    """PNG bytes of the image at ``path``, fitted into ``size`` x ``size``."""
    from PIL import Image

    with Image.open(path) as original:
        image = original.convert("RGB")
    image.thumbnail((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
