"""The format readers of ``trainlog.py`` that return series (:class:`..series.Read`), one
module per format."""
