-- Intervals of the cells' numbers (issue 30; docs/metrics.md, "Intervals").
-- Contract view: cell_intervals(run_id, context_label, concurrency, metric, value, lo, hi, ...).

-- One row per cell and number: the cell's figure and its 95 % interval, computed when the cell was measured
-- (src/core/measure/cell_intervals.py: the rates need each chunk's time, which requests does not keep).
-- lo / hi NULL: the data bound that side of no interval (a p99 of under ~300 values has no upper one).
CREATE TABLE IF NOT EXISTS cell_interval_rows (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    concurrency    INTEGER NOT NULL,
    metric         VARCHAR NOT NULL,   -- total_tps, per_request_tps, tbt_ms, ttft_ms, ttft_p99_ms, tbt_p99_ms
    value          DOUBLE NOT NULL,
    lo             DOUBLE,
    hi             DOUBLE,
    method         VARCHAR NOT NULL,   -- 'batch means, B=20, lag1=0.05' or 'order statistics'
    n              INTEGER NOT NULL,   -- batches, or the sample's values
    PRIMARY KEY (run_id, context_tokens, concurrency, metric)
);
-- v9, a cell of K > 1 repeats (docs/metrics.md, "Repeats"): value is the repeats' mean, lo / hi the t interval across
-- them (K - 1 df), method 't across repeats, K=3', n = K; beside it: repeats (K; NULL for a cell measured once), sd
-- (the run-to-run spread), window_lo / window_hi (the mean's interval the windows' own intervals alone give) and
-- noisier (true: the repeats spread more than their windows' intervals allow, Cochran's Q test at 95 %; NULL: untested).
ALTER TABLE cell_interval_rows ADD COLUMN IF NOT EXISTS repeats INTEGER;
ALTER TABLE cell_interval_rows ADD COLUMN IF NOT EXISTS sd DOUBLE;
ALTER TABLE cell_interval_rows ADD COLUMN IF NOT EXISTS window_lo DOUBLE;
ALTER TABLE cell_interval_rows ADD COLUMN IF NOT EXISTS window_hi DOUBLE;
ALTER TABLE cell_interval_rows ADD COLUMN IF NOT EXISTS noisier BOOLEAN;

-- v9: each repeat's own numbers and window intervals (cell_interval_rows' columns, by repeat), for a cell of K > 1.
CREATE TABLE IF NOT EXISTS cell_repeat_intervals (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    concurrency    INTEGER NOT NULL,
    repeat         INTEGER NOT NULL,
    metric         VARCHAR NOT NULL,
    value          DOUBLE NOT NULL,
    lo             DOUBLE,
    hi             DOUBLE,
    method         VARCHAR NOT NULL,
    n              INTEGER NOT NULL,
    PRIMARY KEY (run_id, context_tokens, concurrency, repeat, metric)
);

-- The intervals of valid cells only, as decode_matrix shows numbers only for them.
CREATE OR REPLACE VIEW cell_intervals AS
SELECT
    i.run_id,
    context_label(i.context_tokens) AS context_label,
    i.concurrency,
    i.metric,
    i.value,
    i.lo,
    i.hi,
    i.method,
    i.n,
    i.context_tokens,
    i.repeats,      -- v9, at the end: K, the across-repeat spread and the windows' interval beside it (see above)
    i.sd,
    i.window_lo,
    i.window_hi,
    i.noisier
FROM cell_interval_rows i
JOIN cells c USING (run_id, context_tokens, concurrency)
WHERE c.status = 'valid'
ORDER BY i.run_id, i.context_tokens, i.concurrency, i.metric;
