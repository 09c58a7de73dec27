"""The pipeline's report: retrieval tables per language and direction, translation and diversity tables
(:mod:`report.tables`), and an HTML page with charts (:mod:`report.html`) and sampled synthesized captions beside
their images (:mod:`report.samples`).
"""
