"""The pipeline's report: retrieval tables per language and direction, translation and diversity tables, and an
HTML page with charts and sampled synthesized captions beside their images.
"""
