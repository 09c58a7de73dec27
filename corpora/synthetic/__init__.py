"""The built-in synthetic dataset: a miniature Multi30K with object boxes and a WMT-like parallel corpus, and
optionally a second, Flickr30K-like corpus (``SyntheticConfig.flickr``) with pivot-language captions only.

Use ``generate(SyntheticConfig(), out_dir, seed=0, languages=Languages("en", ("de",)))``; see ``generator.py``
for the folder layout.
"""

from corpora.synthetic.config import SyntheticConfig
from corpora.synthetic.generator import GenerationSummary, generate

__all__ = ["GenerationSummary", "SyntheticConfig", "generate"]
