-- infermatrix store: macros and views. Re-created on every open and upgrade (CREATE OR REPLACE; connect.SCHEMA_FILES),
-- so they always match the code; bump SCHEMA_VERSION in connect.py when they change.
--
-- Contract views (DESIGN.md §4; column names and order are public, other tools read them):
--   prefill_list, decode_matrix, engine_comparison, latency_percentiles
-- Helper objects (not contract): context_label(), latency_at(), nearest_rank(), wilson_score(), wilson_bound(),
--   decode_details, run_summary, run_method.
-- Views carry an ORDER BY (run, context tokens, concurrency) so `SELECT * FROM view` reads in
-- report order; DuckDB keeps it for plain selects, but add your own ORDER BY when it matters.

-- The label infermatrix.core.contexts.format_context gives: whole K -> '8K', else the plain number.
CREATE OR REPLACE MACRO context_label(tokens) AS
    CASE WHEN tokens % 1024 = 0 THEN CAST(tokens // 1024 AS VARCHAR) || 'K' ELSE CAST(tokens AS VARCHAR) END;

-- Latency (ms) at the nearest stored percentile >= p (histogram_percentiles holds a fixed grid:
-- 0, 1 ... 99, 99.1 ... 99.9, 99.99, 100), of any stored cell whatever its status; NULL if none.
-- e.g. SELECT latency_at('3fa2c1d0', 8192, 64, 'ttft', 95);  -> the stored p95 TTFT
-- Parameters are underscored because DuckDB rejects macro parameters named like a column.
CREATE OR REPLACE MACRO latency_at(_run_id, _context_tokens, _concurrency, _metric, _p) AS (
    SELECT h.value_ms
    FROM histogram_percentiles h
    WHERE h.run_id = _run_id AND h.context_tokens = _context_tokens AND h.concurrency = _concurrency
      AND h.metric = _metric AND h.percentile >= _p
    ORDER BY h.percentile
    LIMIT 1
);

-- The nearest-rank percentile (docs/metrics.md): the value at rank ceil(q x n) (at least 1) of a list already in
-- rank order (list_sort, or list_reverse_sort where the highest ranks first), q a fraction (0.99 for p99); NULL
-- for an empty list. q x n is rounded to 6 decimals before the ceiling, so float error cannot move the rank
-- (99.9 / 100.0 x 1000 is 999.0000000000001 in binary: rank 999, not 1000). The one definition: every view that
-- ranks uses it, and Python's infermatrix.core.quantiles.nearest_rank is tested equal to it.
CREATE OR REPLACE MACRO nearest_rank(_ranked, _q) AS
    _ranked[greatest(1, ceil(round(_q * len(_ranked), 6)))::INTEGER];

-- The 95 % Wilson score interval of a share good / n (docs/metrics.md, attainment_lo/_hi): _side -1 gives its lower
-- bound, +1 its upper, clipped to [0, 1]; NULL without a trial (n NULL or 0: greatest/least skip a NULL, so the
-- CASE keeps an unknown share from reading as the interval [0, 1]). wilson_score is the formula for any p and z.
CREATE OR REPLACE MACRO wilson_score(_p, _n, _z, _side) AS
    CASE WHEN _n > 0 THEN
        greatest(0.0, least(1.0, ((_p + _z * _z / (2 * _n)) + _side * _z * sqrt(_p * (1 - _p) / _n + _z * _z / (4.0 * _n * _n)))
                                 / (1 + _z * _z / _n)))
    END;
CREATE OR REPLACE MACRO wilson_bound(_good, _n, _side) AS wilson_score(_good::DOUBLE / nullif(_n, 0), _n, 1.959963984540054, _side);

-- One cold request per context; numbers only for valid probes (like decode_matrix).
CREATE OR REPLACE VIEW prefill_list AS
SELECT
    p.run_id,
    r.engine,
    r.model,
    context_label(p.context_tokens) AS context_label,
    p.context_tokens,
    p.prompt_tokens,
    CASE WHEN p.status = 'valid' THEN p.prompt_tps END AS prompt_tps,
    CASE WHEN p.status = 'valid' THEN p.ttft_ms END AS ttft_ms,
    p.status,
    p.samples                                  -- v3: cold probes ttft_ms is the median of (prefill_samples)
FROM prefill p
LEFT JOIN runs r ON r.run_id = p.run_id
ORDER BY p.run_id, p.context_tokens;

-- The decode matrix. A looped/error/client-bound cell's numbers are evidence, not results: the
-- view hides them (the cells table keeps them) so no report or comparison can show them by mistake.
CREATE OR REPLACE VIEW decode_matrix AS
SELECT
    c.run_id,
    r.engine,
    r.model,
    context_label(c.context_tokens) AS context_label,
    c.context_tokens,
    c.concurrency,
    c.status,
    CASE WHEN c.status = 'valid' THEN c.total_tps END AS total_tps,
    CASE WHEN c.status = 'valid' THEN c.per_request_tps END AS per_request_tps,
    CASE WHEN c.status = 'valid' THEN c.ttft_ms END AS ttft_ms,
    CASE WHEN c.status = 'valid' THEN c.tbt_ms END AS tbt_ms,
    CASE WHEN c.status = 'valid' THEN c.avg_active END AS avg_active,
    CASE WHEN c.status = 'valid' THEN c.completed END AS completed,
    CASE WHEN c.status = 'valid' THEN c.output_tokens END AS output_tokens,
    CASE WHEN c.status = 'valid' THEN c.measured_s END AS measured_s,
    -- v3, added at the end: the most requests the engine ran at once (any status: it is why a cell is
    -- admission_limited; NULL without engine gauges), and ttft_ms's two populations.
    c.ran_at_most,
    CASE WHEN c.status = 'valid' THEN c.ttft_burst_ms END AS ttft_burst_ms,
    CASE WHEN c.status = 'valid' THEN c.ttft_restart_ms END AS ttft_restart_ms,
    -- v4, added at the end: the columns of a valid cell the client verdict marked doubtful (its clock may have
    -- moved them more than the usual error; why: cells.flags.client.doubtful), sorted; [] none; NULL not judged.
    CASE WHEN c.status = 'valid' THEN list_sort(json_keys(c.flags, '$.client.doubtful')) END AS doubtful,
    -- v9, at the end: the repeats a cell of matrix.repeat K > 1 was measured in (its numbers are their means; NULL:
    -- measured once), and the metrics whose repeats spread more than their windows' intervals allow (the metrics
    -- whose cell_interval_rows.noisier is true, kept in flags.repeats.noisier), sorted; [] none; NULL not judged
    -- (measured once, or not valid).
    TRY_CAST(json_extract(c.flags, '$.repeats.k') AS INTEGER) AS repeats,
    CASE WHEN c.status = 'valid' AND TRY_CAST(json_extract(c.flags, '$.repeats.k') AS INTEGER) >= 2 THEN
        list_sort(coalesce(CAST(json_extract(c.flags, '$.repeats.noisier') AS VARCHAR[]), []::VARCHAR[]))
    END AS noisier_than_window
FROM cells c
LEFT JOIN runs r ON r.run_id = c.run_id
ORDER BY c.run_id, c.context_tokens, c.concurrency;

-- The measurement method of a run, as engine_comparison compares it: what makes two runs' numbers like
-- for like. Temperature is in the config; runs measured before it was a field sent 0 (greedy).
CREATE OR REPLACE VIEW run_method AS
SELECT
    r.run_id, r.duration_s, r.max_output, r.prompt_mode, r.api,
    coalesce(TRY_CAST(json_extract_string(r.config, '$.matrix.temperature') AS DOUBLE),
             CASE WHEN r.source IS NULL AND r.config IS NOT NULL THEN 0.0 END) AS temperature
FROM runs r;

-- Every ordered pair of distinct runs over the cells valid in both; ratio = value_b / value_a
-- (> 1 means run_b has more throughput, or more latency for ttft_ms/tbt_ms). NULL ratio when value_a is 0.
-- method_match (v3, at the end): true when the two runs measured alike (duration, max output, prompt
-- mode, API, temperature, and the cell's token source), false when any of these differs, NULL when
-- one of them is not recorded for either run and none differs.
CREATE OR REPLACE VIEW engine_comparison AS
WITH v AS (
    SELECT d.*, c.token_source FROM decode_matrix d
    JOIN cells c ON c.run_id = d.run_id AND c.context_tokens = d.context_tokens AND c.concurrency = d.concurrency
    WHERE d.status = 'valid'
), pairs AS (
    SELECT a.run_id AS run_a, b.run_id AS run_b, a.context_label, a.context_tokens, a.concurrency,
           a.total_tps AS a_total, b.total_tps AS b_total,
           a.per_request_tps AS a_per, b.per_request_tps AS b_per,
           a.ttft_ms AS a_ttft, b.ttft_ms AS b_ttft,
           a.tbt_ms AS a_tbt, b.tbt_ms AS b_tbt,
           CASE
               WHEN coalesce(ma.duration_s <> mb.duration_s, false) OR coalesce(ma.max_output <> mb.max_output, false)
                 OR coalesce(ma.prompt_mode <> mb.prompt_mode, false) OR coalesce(ma.api <> mb.api, false)
                 OR coalesce(ma.temperature <> mb.temperature, false) OR coalesce(a.token_source <> b.token_source, false)
               THEN false
               WHEN ma.duration_s IS NULL OR mb.duration_s IS NULL OR ma.max_output IS NULL OR mb.max_output IS NULL
                 OR ma.prompt_mode IS NULL OR mb.prompt_mode IS NULL OR ma.api IS NULL OR mb.api IS NULL
                 OR ma.temperature IS NULL OR mb.temperature IS NULL OR a.token_source IS NULL OR b.token_source IS NULL
               THEN NULL
               ELSE true
           END AS method_match
    FROM v a
    JOIN v b ON b.context_tokens = a.context_tokens AND b.concurrency = a.concurrency AND b.run_id <> a.run_id
    LEFT JOIN run_method ma ON ma.run_id = a.run_id
    LEFT JOIN run_method mb ON mb.run_id = b.run_id
), long AS (
    SELECT run_a, run_b, context_label, context_tokens, concurrency, method_match, 1 AS k, 'total_tps' AS metric, a_total AS value_a, b_total AS value_b FROM pairs
    UNION ALL
    SELECT run_a, run_b, context_label, context_tokens, concurrency, method_match, 2, 'per_request_tps', a_per, b_per FROM pairs
    UNION ALL
    SELECT run_a, run_b, context_label, context_tokens, concurrency, method_match, 3, 'ttft_ms', a_ttft, b_ttft FROM pairs
    UNION ALL
    SELECT run_a, run_b, context_label, context_tokens, concurrency, method_match, 4, 'tbt_ms', a_tbt, b_tbt FROM pairs
)
SELECT run_a, run_b, context_label, concurrency, metric, value_a, value_b,
       value_b / NULLIF(value_a, 0) AS ratio, method_match
FROM long
ORDER BY run_a, run_b, context_tokens, concurrency, k;

-- Percentiles (ms) of each valid cell's latency histograms (ttft, tbt, e2e, itl), decoded at save time.
-- Like decode_matrix, only valid cells; latency_at() reads any cell. max is the largest recorded
-- value (HDR-rounded up, within 0.1 %).
CREATE OR REPLACE VIEW latency_percentiles AS
SELECT
    h.run_id,
    context_label(h.context_tokens) AS context_label,
    h.concurrency,
    h.metric,
    max(h.value_ms) FILTER (WHERE h.percentile = 50) AS p50,
    max(h.value_ms) FILTER (WHERE h.percentile = 90) AS p90,
    max(h.value_ms) FILTER (WHERE h.percentile = 99) AS p99,
    max(h.value_ms) FILTER (WHERE h.percentile = 99.9) AS p999,
    max(h.value_ms) FILTER (WHERE h.percentile = 100) AS max
FROM histogram_percentiles h
JOIN cells c ON c.run_id = h.run_id AND c.context_tokens = h.context_tokens AND c.concurrency = h.concurrency
WHERE c.status = 'valid'
GROUP BY h.run_id, h.context_tokens, h.concurrency, h.metric
ORDER BY h.run_id, h.context_tokens, h.concurrency,
         CASE h.metric WHEN 'ttft' THEN 1 WHEN 'tbt' THEN 2 WHEN 'e2e' THEN 3 WHEN 'itl' THEN 4 ELSE 5 END, h.metric;

-- Why a cell has its status, and its request outcomes: what the reports print under the matrix.
CREATE OR REPLACE VIEW decode_details AS
SELECT
    c.run_id,
    context_label(c.context_tokens) AS context_label,
    c.context_tokens,
    c.concurrency,
    c.status,
    c.reason,
    c.token_source,
    c.prompt_tokens,
    coalesce(q.requests, 0) AS requests,
    coalesce(q.failed, 0) AS failed_requests,
    coalesce(q.looped, 0) AS looped_requests,
    c.started_at,
    c.finished_at,
    c.flags,
    c.ttft_burst_ms,
    c.ttft_burst_n,
    c.ttft_restart_ms,
    c.ttft_restart_n,
    c.ran_at_most
FROM cells c
LEFT JOIN (
    SELECT run_id, context_tokens, concurrency,
           count(*) AS requests,
           count(*) FILTER (WHERE outcome NOT IN ('ok', 'cancelled')) AS failed,
           count(*) FILTER (WHERE looped) AS looped
    FROM requests
    GROUP BY run_id, context_tokens, concurrency
) q ON q.run_id = c.run_id AND q.context_tokens = c.context_tokens AND q.concurrency = c.concurrency
ORDER BY c.run_id, c.context_tokens, c.concurrency;

-- One line per run, newest first: what `infermatrix report` lists.
CREATE OR REPLACE VIEW run_summary AS
SELECT
    r.run_id, r.name, r.engine, r.engine_version, r.model, r.status, r.started_at, r.finished_at,
    (SELECT count(*) FROM prefill p WHERE p.run_id = r.run_id) AS prefill_points,
    (SELECT count(*) FROM cells c WHERE c.run_id = r.run_id) AS cells,
    (SELECT count(*) FROM cells c WHERE c.run_id = r.run_id AND c.status = 'valid') AS valid_cells
FROM runs r
ORDER BY r.started_at DESC NULLS LAST, r.run_id;
