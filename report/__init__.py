"""The pipeline's report: a headline made from the numbers (:mod:`report.headline`), retrieval tables per language
and direction, translation and diversity tables (:mod:`report.tables`), examples of captions the two translation
systems translate differently (:mod:`report.samples`), and an HTML page with charts (:mod:`report.html`) that renders
the Markdown (:mod:`report.markdown`).
"""
