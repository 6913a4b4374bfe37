"""Open-loop load: arrival processes and their schedules (``arrivals``; the process a config names is parsed in
``core/arrival_spec.py``, below the config), the open-loop sender and its judgement (``openloop``,
``point_send``), rate points (``points``), trace replay (``traces``, ``trace_prompts``, ``trace_point``) and the
SLO search over points and cells (``search``; its pure state machine is ``core/slo/``), and what such a step gets
of its run (``context``).

May import: ``core/measure/``, ``core/stream/``, ``core/engine/``, ``core/store/``, ``core/report/``
(``point_settings``), ``core/slo/`` and the core's plain modules. Never ``run`` at run time: the runner hands a
step a ``RunContext`` (``context``: the run's config, store, engine steps, and its progress display through
``live``); ``run`` imports this package. Never ``distributed``: points send from the run's own process
(tests/core/test_layers.py).
"""
