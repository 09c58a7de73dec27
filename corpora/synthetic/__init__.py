"""The built-in synthetic dataset: a miniature Multi30K with object boxes and a WMT-like parallel corpus.

Use ``generate(SyntheticConfig(), out_dir, seed=0, languages=Languages("en", ("de",)))``; see ``generator.py``
for the folder layout.
"""

from corpora.synthetic.config import SyntheticConfig
from corpora.synthetic.generator import GenerationSummary, generate

__all__ = ["GenerationSummary", "SyntheticConfig", "generate"]
