-- infermatrix store: the SLO search (issue 20 item 3; docs/load.md, "Search"). Applied on every open and upgrade
-- after load.sql (it reads points and point_requests) and slo_views.sql (its macros); every statement is idempotent.
-- Tables: slo_searches (one search per run: its answer), slo_search_probes (every probe, in order).
-- Views: slo_search (contract: its column names and order are public), slo_points (open-loop points judged
-- by the run's SLOs, as slo_cells judges decode cells), point_latencies (helper).

CREATE TABLE IF NOT EXISTS slo_searches (
    run_id          VARCHAR PRIMARY KEY,
    slo             VARCHAR NOT NULL,   -- the SLO's name in slo_limits
    over            VARCHAR NOT NULL,   -- rate | concurrency
    context_tokens  INTEGER,
    arrival         VARCHAR,            -- rate probes' arrival process
    start           DOUBLE,             -- the first load probed
    start_source    VARCHAR,            -- 'stated', or how it was measured
    resolution      VARCHAR,            -- '10%' (relative to highest_pass) or '0.5' (absolute)
    max_load        DOUBLE,             -- NULL: no stated maximum
    highest_pass    DOUBLE,             -- the highest load that met the SLO, rate: as delivered (NULL: none did)
    lowest_fail     DOUBLE,             -- the lowest load that did not, rate: as delivered (NULL: none failed)
    status          VARCHAR NOT NULL,   -- running | found | max_reached | none_passed | too_many_probes | stopped | interrupted
    reason          VARCHAR,            -- why it stopped (a probe that was not valid, the SLO not judged ...)
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP
);

CREATE TABLE IF NOT EXISTS slo_search_probes (
    run_id          VARCHAR NOT NULL,
    probe           INTEGER NOT NULL,   -- order in the search, from 0 (a rate probe is stored as points.point = probe)
    step            VARCHAR,            -- start | double | halve | bisect | max
    load            DOUBLE,             -- asked: requests/s (rate: it counts at `achieved`) or concurrency
    point           INTEGER,            -- rate: the open-loop point (points.point)
    context_tokens  INTEGER,            -- concurrency: the decode cell (cells' key, with concurrency = load)
    status          VARCHAR,            -- the point's or the cell's status
    meets           BOOLEAN,            -- the SLO judged on it (slo_points / slo_cells); NULL: not judged
    verdict         VARCHAR,            -- pass | fail | stop
    reason          VARCHAR,
    attainment      DOUBLE,             -- share of its requests meeting every limit
    ttft_p99_ms     DOUBLE,
    tpot_p99_ms     DOUBLE,             -- per-request TPOT over the judged requests (both kinds: slo_verdicts())
    output_tps      DOUBLE,
    achieved        DOUBLE,             -- rate: achieved_rate; concurrency: the cell's mean in-flight requests
    saved_at        TIMESTAMP,
    PRIMARY KEY (run_id, probe)
);
-- v13: how many times the probe was measured (search.client_retries: a client_bound try is measured again, each try
-- replacing the last; its reason keeps what the earlier tries said). NULL: stored before v13 (its reason says).
ALTER TABLE slo_search_probes ADD COLUMN IF NOT EXISTS tries INTEGER;

-- Every request of a valid open-loop point, with the per-request metrics the SLO limits name (times from the
-- SCHEDULED send, as the point's own figures: a lagging client is charged, docs/load.md; TPOT and tps by
-- request_tpot_ms() / request_tps(), as for cells); then the columns
-- slo_verdicts() reads (context_tokens and concurrency NULL: a point is keyed by `point`; finished: outcome ok).
CREATE OR REPLACE VIEW point_latencies AS
SELECT
    q.run_id, q.point, q.request_no, q.outcome, q.output_tokens, q.ttft_ms, q.e2e_ms,
    request_tpot_ms(q.output_tokens, q.first_token, q.ended) AS tpot_ms,
    request_tps(q.output_tokens, q.first_token, q.ended) AS tps,
    NULL::INTEGER AS context_tokens, NULL::INTEGER AS concurrency, q.outcome = 'ok' AS finished,
    q.ttfo_ms  -- v11 (docs/metrics.md, TTFO)
FROM point_requests q
JOIN points p ON p.run_id = q.run_id AND p.point = q.point
WHERE p.status = 'valid';

-- Per valid open-loop point and SLO: attainment (good / judged requests) and whether it meets the SLO, by the
-- one judgement of slo_cells (slo_verdicts() in slo_views.sql) over the point's requests; TPOT p50/p99 of the
-- per-request TPOT over its finished requests. Then the point's delivered rate (achieved_rate), after the
-- contract columns: the search counts a rate probe at the rate it delivered (docs/load.md, "Search").
CREATE OR REPLACE VIEW slo_points AS
SELECT
    p.run_id, s.slo, p.point, p.requested_rate,
    v.good::DOUBLE / v.judged AS attainment,
    coalesce(v.judged, 0) AS judged_requests, coalesce(v.good, 0) AS good_requests,
    v.meets,
    p.ttft_p99_ms, v.tpot_p50_ms, v.tpot_p99_ms, p.output_tps,
    p.achieved_rate
FROM (SELECT DISTINCT run_id, slo FROM slo_limits) s
JOIN points p ON p.run_id = s.run_id AND p.status = 'valid'
LEFT JOIN slo_verdicts('point_latencies') v ON v.run_id = p.run_id AND v.slo = s.slo AND v.point = p.point
ORDER BY p.run_id, s.slo, p.point;

-- The search's answer: the highest load that met the SLO, the lowest that did not (the interval), the
-- resolution it was narrowed to, and how many probes it took.
CREATE OR REPLACE VIEW slo_search AS
SELECT
    s.run_id, s.slo, s.over, context_label(s.context_tokens) AS context_label,
    s.highest_pass, s.lowest_fail, s.lowest_fail - s.highest_pass AS interval_width, s.resolution,
    (SELECT count(*) FROM slo_search_probes p WHERE p.run_id = s.run_id) AS probes,
    s.status, s.reason,
    s.context_tokens, s.arrival, s.start, s.start_source, s.max_load, s.started_at, s.finished_at
FROM slo_searches s
ORDER BY s.run_id;
