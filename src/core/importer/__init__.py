"""Bringing results infermatrix did not measure into a store: published benchmark pages.

``parse_page`` reads the text of a published "Speed test matrix" page; ``import_page`` stores it as
a run with status ``imported`` (so ``infermatrix compare`` can hold a run against it). Parquet
exports of other databases are merged by :mod:`infermatrix.core.store.parquet`.
"""

from infermatrix.core.importer.page_text import PageError, PublishedPage, parse_page
from infermatrix.core.importer.published_run import import_page, page_run_id

__all__ = ["PageError", "PublishedPage", "parse_page", "import_page", "page_run_id"]
