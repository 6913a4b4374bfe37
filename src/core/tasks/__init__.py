"""Tasks with checkable answers (issue 31 item 2; docs/workloads.md, ``tasks``): the built-in generated set and
its solver (``builtin``), a user's JSONL file (``taskfile``), answer extraction and judging (``judge``), and the
statistics of a task pass: the interval of the mean output tokens, Wilson, the auto-stop rule and the tests
``compare`` uses (``stats``). Pure: no layer, no I/O but the task file's read."""
