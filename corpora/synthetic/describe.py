"""Sample true meanings of a scene: caption meanings for images, richer ones for the parallel corpus.

Every builder reads its facts from the scene (which objects fit a description, which relations and
places hold), so a sampled meaning never says something false about the scene. Builders return None
when the scene offers nothing to say in their form, and the sampler falls back to an existence sentence.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from corpora.synthetic.inventory import COLOUR_COVERS, COLOURS, PLACES, RELATIONS, SHAPES, SIZES, colour_cover
from corpora.synthetic.meaning import (
    Absent,
    Compared,
    Exists,
    ExistsFrame,
    Located,
    LocatedFrame,
    Meaning,
    Mention,
    Related,
    RelatedFrame,
    Vagueness,
    mentions,
    with_mentions,
)
from corpora.synthetic.scenes import Scene, matching, place_holds, relation_holds
from corpora.synthetic.streams import chance, integer, pick, pick_weighted, shuffled

Builder = Callable[[random.Random, Scene, bool], Meaning | None]  # (rng, scene, for_parallel) -> meaning

_MAX_ITEMS = 3  # longer lists make sentences longer than Multi30K's
_CAPTION_EXISTS: tuple[ExistsFrame, ...] = ("there_is", "picture_shows", "picture_of")
_PARALLEL_EXISTS: tuple[ExistsFrame, ...] = ("there_is", "picture_shows")
_LOCATED: tuple[LocatedFrame, ...] = ("subject_first", "place_first")
_CAPTION_RELATED: tuple[RelatedFrame, ...] = ("clause", "phrase")
_PARALLEL_RELATED: tuple[RelatedFrame, ...] = ("clause", "landmark_first")  # a frame captions never use


def caption_meaning(rng: random.Random, scene: Scene) -> Meaning:
    """A Multi30K-like caption meaning: existence, an absolute place, or a relation between two shapes."""
    builder = pick_weighted(rng, [(_exists, 0.35), (_located, 0.25), (_related, 0.40)])
    return builder(rng, scene, False) or _exists(rng, scene, False)


def parallel_meaning(rng: random.Random, scene: Scene) -> Meaning:
    """A scene description for the parallel corpus, including frames that captions never use."""
    builders: list[tuple[Builder, float]] = [
        (_exists, 0.2),
        (_located, 0.15),
        (_related, 0.3),
        (_compared, 0.15),
        (_absent, 0.2),
    ]
    return pick_weighted(rng, builders)(rng, scene, True) or _exists(rng, scene, True)


def _mention(rng: random.Random, scene: Scene, index: int, *, definite_p: float = 0.0, full: bool = False) -> Mention:
    """Describe one object by its shape and at least one attribute (a bare "kruh" makes too short sentences).

    ``full`` names both colour and size; ``definite_p`` is the chance of "the" where the description is unique.
    """
    obj = scene.objects[index]
    draw = 0.5 if full else rng.random()
    colour = obj.colour if draw < 0.75 else None  # colour alone 50%, colour and size 25%, size alone 25%
    size = obj.size if draw >= 0.5 else None
    unique = len(matching(scene, obj.shape, colour, size)) == 1
    return Mention(obj.shape, colour, size, definite=unique and chance(rng, definite_p))


def _exists(rng: random.Random, scene: Scene, parallel: bool) -> Meaning:
    """List one to three objects, each with the exact count of the objects its description fits."""
    frame = pick(rng, _PARALLEL_EXISTS if parallel else _CAPTION_EXISTS)
    wanted = integer(rng, 1, min(_MAX_ITEMS, len(scene.objects)))
    described: set[int] = set()
    chosen: list[int] = []
    items: list[Mention] = []
    for index in shuffled(rng, range(len(scene.objects))):
        if len(items) == wanted:
            break
        mention = _mention(rng, scene, index)
        group = matching(scene, mention.shape, mention.colour, mention.size)
        if described.intersection(group):
            continue  # each object is described at most once, so every count is exact
        described.update(group)
        chosen.append(index)
        items.append(Mention(mention.shape, mention.colour, mention.size, count=len(group)))
    if len(items) == 1 and frame != "there_is":
        items = [_full_item(scene, chosen[0])]  # "Obrázek zachycuje malý kruh." is too terse: name it in full
    if frame == "picture_of" and any(item.count > 1 for item in items):
        frame = "picture_shows"  # "a picture of" takes no numerals (avoids Czech instrumental numerals)
    return Exists(items=tuple(items), frame=frame)


def _full_item(scene: Scene, index: int) -> Mention:
    obj = scene.objects[index]
    return Mention(obj.shape, obj.colour, obj.size, count=len(matching(scene, obj.shape, obj.colour, obj.size)))


def _located(rng: random.Random, scene: Scene, parallel: bool) -> Meaning | None:
    """Say where in the picture one object is (top, bottom, left, right, middle)."""
    index = integer(rng, 0, len(scene.objects) - 1)
    places = [place for place in PLACES if place_holds(place, scene.objects[index].box, scene.image_size)]
    if not places:
        return None
    frame = pick(rng, _LOCATED)
    # "At the top there is the red circle" is odd, so only the subject-first frame may be definite.
    subject = _mention(rng, scene, index, definite_p=0.3 if frame == "subject_first" else 0.0)
    return Located(subject=subject, place=pick(rng, places), frame=frame)


def _related(rng: random.Random, scene: Scene, parallel: bool) -> Meaning | None:
    """Relate two objects by one of the spatial relations that holds between their boxes."""
    facts = _true_relations(scene)
    if not facts:
        return None
    first, relation, second = pick(rng, facts)
    frame = pick(rng, _PARALLEL_RELATED if parallel else _CAPTION_RELATED)
    full = _same_description(scene, first, second)  # "a big star next to a big star" names both in full
    # Only the clause may open with "the": "there is the ..." and a caption "The X next to a Y." read oddly.
    subject = _mention(rng, scene, first, definite_p=0.2 if frame == "clause" else 0.0, full=full)
    landmark = _mention(rng, scene, second, definite_p=0.5 if frame == "landmark_first" else 0.2, full=full)
    return Related(subject=subject, relation=relation, landmark=landmark, frame=frame)


def _same_description(scene: Scene, first: int, second: int) -> bool:
    a, b = scene.objects[first], scene.objects[second]
    return a.shape == b.shape and (a.colour == b.colour or a.size == b.size)


def _true_relations(scene: Scene) -> list[tuple[int, str, int]]:
    """(first, relation, second) for every relation that holds, between objects that differ in some label.

    Two identical shapes ("a big red star to the right of a big red star") are left out: true, but no
    description could tell the reader which is which.
    """
    count = len(scene.objects)
    labels = [(obj.shape, obj.colour, obj.size) for obj in scene.objects]
    return [
        (first, relation, second)
        for first in range(count)
        for second in range(count)
        if labels[first] != labels[second]
        for relation in RELATIONS
        if relation_holds(relation, scene.objects[first].box, scene.objects[second].box, scene.image_size)
    ]


def _compared(rng: random.Random, scene: Scene, parallel: bool) -> Meaning | None:
    """Compare a big and a small object, each named by a unique shape and colour ("the red circle is bigger ...")."""
    nameable = [i for i, obj in enumerate(scene.objects) if len(matching(scene, obj.shape, obj.colour)) == 1]
    pairs = [(a, b) for a in nameable for b in nameable if scene.objects[a].size != scene.objects[b].size]
    if not pairs:
        return None
    first, second = pick(rng, pairs)
    subject, other = scene.objects[first], scene.objects[second]
    return Compared(
        subject=Mention(subject.shape, subject.colour, definite=True),
        other=Mention(other.shape, other.colour, definite=True),
        bigger=subject.size == "big",
    )


def _absent(rng: random.Random, scene: Scene, parallel: bool) -> Meaning | None:
    """Name a shape and colour that no object of the scene has ("the picture shows no green square")."""
    for _ in range(20):
        shape, colour = pick(rng, SHAPES), pick(rng, tuple(COLOURS))
        if not matching(scene, shape, colour):
            size = pick(rng, tuple(SIZES)) if chance(rng, 0.3) else None
            return Absent(missing=Mention(shape, colour, size))
    return None


def underspecify(rng: random.Random, scene: Scene, meaning: Meaning, share: float) -> Meaning:
    """Mark each mention of a caption meaning vague (see ``Mention.vague``) with probability ``share``.

    Only a mention whose vague phrase fits exactly the objects its exact phrase fits can be marked, so the
    image always settles what the vague word stands for; a caption with no such mention stays as it is.
    Existence claims about what is absent are never marked (the image shows nothing to settle them).
    """
    if isinstance(meaning, Absent | Compared):
        return meaning
    marked = []
    for mention in mentions(meaning):
        readings = vague_readings(scene, mention)
        if readings and chance(rng, share):
            mention = replace(mention, vague=pick(rng, readings))
        marked.append(mention)
    return with_mentions(meaning, marked)


def vague_readings(scene: Scene, mention: Mention) -> list[Vagueness]:
    """The attributes of ``mention`` that its cover term can say without fitting other objects of ``scene``."""
    exact = set(matching(scene, mention.shape, mention.colour, mention.size))
    readings: list[Vagueness] = []
    cover = colour_cover(mention.colour) if mention.colour else None
    if cover is not None:
        covered = {i for colour in COLOUR_COVERS[cover] for i in matching(scene, mention.shape, colour, mention.size)}
        if covered == exact:
            readings.append("colour")
    if mention.colour is not None:  # "a big shape" says too little to be a caption's phrase
        any_shape = {
            i
            for i, obj in enumerate(scene.objects)
            if obj.colour == mention.colour and mention.size in (None, obj.size)
        }
        if any_shape == exact:
            readings.append("shape")
    return readings
