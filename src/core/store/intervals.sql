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
    i.context_tokens
FROM cell_interval_rows i
JOIN cells c USING (run_id, context_tokens, concurrency)
WHERE c.status = 'valid'
ORDER BY i.run_id, i.context_tokens, i.concurrency, i.metric;
