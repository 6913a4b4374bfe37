-- Intervals of the prefill points' numbers (issue 30 item 1; docs/metrics.md, "Prefill list").
-- Contract view: prefill_intervals(run_id, context_label, metric, value, lo, hi, ...): the prefill list's sibling of
-- cell_intervals (a prefill point has no concurrency, so it is not folded into that view's contract columns).

-- One row per prefill point and number: the point's figure (the median of its cold probes) and its 95 % interval,
-- computed when the point was measured from the probes it kept (src/core/intervals/median.py).
-- lo / hi NULL: too few probes for an interval (one probe: prefill_samples = 1).
CREATE TABLE IF NOT EXISTS prefill_interval_rows (
    run_id         VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    metric         VARCHAR NOT NULL,   -- ttft_ms, prompt_tps (the prefill_list columns)
    value          DOUBLE NOT NULL,
    lo             DOUBLE,
    hi             DOUBLE,
    method         VARCHAR NOT NULL,   -- 't on ln values (log-normal assumed), n=3' or 'order statistics'
    n              INTEGER NOT NULL,   -- the cold probes the point is the median of
    PRIMARY KEY (run_id, context_tokens, metric)
);

-- The intervals of valid points only, as prefill_list shows numbers only for them.
CREATE OR REPLACE VIEW prefill_intervals AS
SELECT
    i.run_id,
    context_label(i.context_tokens) AS context_label,
    i.metric,
    i.value,
    i.lo,
    i.hi,
    i.method,
    i.n,
    i.context_tokens
FROM prefill_interval_rows i
JOIN prefill p USING (run_id, context_tokens)
WHERE p.status = 'valid'
ORDER BY i.run_id, i.context_tokens, i.metric;
