-- infermatrix store: the SLO search (issue 20 item 3; docs/load.md, "Search"). Applied on every read-write
-- open after load.sql (it reads points and point_requests) and slo_views.sql; every statement is idempotent.
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
    highest_pass    DOUBLE,             -- the highest load that met the SLO (NULL: none did)
    lowest_fail     DOUBLE,             -- the lowest load that did not (NULL: none failed)
    status          VARCHAR NOT NULL,   -- running | found | max_reached | none_passed | too_many_probes | stopped | interrupted
    reason          VARCHAR,            -- why it stopped (a probe that was not valid, the SLO not judged ...)
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP
);

CREATE TABLE IF NOT EXISTS slo_search_probes (
    run_id          VARCHAR NOT NULL,
    probe           INTEGER NOT NULL,   -- order in the search, from 0 (a rate probe is stored as points.point = probe)
    step            VARCHAR,            -- start | double | halve | bisect | max
    load            DOUBLE,             -- requests/s (rate) or concurrency
    point           INTEGER,            -- rate: the open-loop point (points.point)
    context_tokens  INTEGER,            -- concurrency: the decode cell (cells' key, with concurrency = load)
    status          VARCHAR,            -- the point's or the cell's status
    meets           BOOLEAN,            -- the SLO judged on it (slo_points / slo_cells); NULL: not judged
    verdict         VARCHAR,            -- pass | fail | stop
    reason          VARCHAR,
    attainment      DOUBLE,             -- share of its requests meeting every limit
    ttft_p99_ms     DOUBLE,
    tpot_p99_ms     DOUBLE,             -- rate: per-request TPOT; concurrency: the cell's TBT histogram
    output_tps      DOUBLE,
    achieved        DOUBLE,             -- rate: achieved_rate; concurrency: the cell's mean in-flight requests
    saved_at        TIMESTAMP,
    PRIMARY KEY (run_id, probe)
);

-- Every request of a valid open-loop point, with the per-request metrics the SLO limits name (times from the
-- SCHEDULED send, as the point's own figures: a lagging client is charged, docs/load.md).
CREATE OR REPLACE VIEW point_latencies AS
SELECT
    q.run_id, q.point, q.request_no, q.outcome, q.output_tokens, q.ttft_ms, q.e2e_ms,
    CASE WHEN q.output_tokens > 1 AND q.ended > q.first_token
         THEN (q.ended - q.first_token) * 1000.0 / (q.output_tokens - 1) END AS tpot_ms,
    CASE WHEN q.output_tokens > 1 AND q.ended > q.first_token
         THEN (q.output_tokens - 1) / (q.ended - q.first_token) END AS tps
FROM point_requests q
JOIN points p ON p.run_id = q.run_id AND p.point = q.point
WHERE p.status = 'valid';

-- Per valid open-loop point and SLO: attainment (good / judged requests), the nearest-rank percentiles the
-- SLO's limits name over its requests, and whether it meets the SLO — the rules of slo_cells (docs/slo.md)
-- but on the point's requests: a point has no per-token histogram, so a TPOT (or tps) percentile limit is
-- judged on the per-request TPOT, not on token gaps.
CREATE OR REPLACE VIEW slo_points AS
WITH judged AS (
    SELECT l.run_id, l.slo, r.point, r.request_no, r.outcome = 'ok' AS finished, l.percentile,
           CASE l.metric
               WHEN 'ttft_ms' THEN coalesce(r.ttft_ms <= l.limit_value, false)
               WHEN 'e2e_ms' THEN coalesce(r.e2e_ms <= l.limit_value, false)
               WHEN 'tpot_ms' THEN coalesce(r.tpot_ms <= l.limit_value, true)  -- one token: no TPOT to judge
               WHEN 'tps' THEN coalesce(r.tps >= l.limit_value, true)
           END AS ok
    FROM slo_limits l JOIN point_latencies r ON r.run_id = l.run_id
    WHERE l.metric <> 'attainment'
), per_request AS (
    SELECT run_id, slo, point, request_no, bool_and(finished) AND bool_and(ok) AS good,
           coalesce(bool_and(ok) FILTER (WHERE percentile IS NULL), true) AS per_request_ok
    FROM judged GROUP BY ALL
), counts AS (
    SELECT run_id, slo, point, count(*) AS judged, count(*) FILTER (WHERE good) AS good, bool_and(per_request_ok) AS per_request_ok
    FROM per_request GROUP BY ALL
), pct_values AS (
    SELECT l.run_id, l.slo, r.point, l.metric, l.percentile, l.limit_value,
           CASE l.metric WHEN 'ttft_ms' THEN r.ttft_ms WHEN 'e2e_ms' THEN r.e2e_ms ELSE r.tpot_ms END AS x
    FROM slo_limits l JOIN point_latencies r ON r.run_id = l.run_id
    WHERE l.percentile IS NOT NULL AND l.metric <> 'attainment' AND r.outcome = 'ok'
), pct_lists AS (
    SELECT run_id, slo, point, metric, percentile, limit_value, list_sort(list(x) FILTER (WHERE x IS NOT NULL)) AS xs
    FROM pct_values GROUP BY ALL
), pct AS (
    SELECT run_id, slo, point,
           count(*) FILTER (WHERE NOT ok) AS failed, count(*) FILTER (WHERE ok IS NULL) AS unknown
    FROM (
        SELECT run_id, slo, point,
               CASE WHEN len(xs) = 0 THEN NULL
                    WHEN metric = 'tps' THEN xs[greatest(1, ceil(percentile / 100.0 * len(xs)))::INTEGER] <= 1000.0 / limit_value
                    ELSE xs[greatest(1, ceil(percentile / 100.0 * len(xs)))::INTEGER] <= limit_value END AS ok
        FROM pct_lists
    ) GROUP BY ALL
), goal AS (
    SELECT run_id, slo, max(limit_value) AS attainment_goal FROM slo_limits WHERE metric = 'attainment' GROUP BY ALL
), tpot AS (
    SELECT run_id, point, list_sort(list(tpot_ms) FILTER (WHERE tpot_ms IS NOT NULL AND outcome = 'ok')) AS xs
    FROM point_latencies GROUP BY ALL
), x AS (
    SELECT s.run_id, s.slo, p.point, p.requested_rate, p.ttft_p99_ms, p.output_tps,
           n.judged, n.good, n.per_request_ok, pc.failed, pc.unknown, g.attainment_goal,
           CASE WHEN len(t.xs) > 0 THEN t.xs[greatest(1, ceil(0.5 * len(t.xs)))::INTEGER] END AS tpot_p50_ms,
           CASE WHEN len(t.xs) > 0 THEN t.xs[greatest(1, ceil(0.99 * len(t.xs)))::INTEGER] END AS tpot_p99_ms,
           EXISTS (SELECT 1 FROM slo_limits l WHERE l.run_id = s.run_id AND l.slo = s.slo
                   AND l.percentile IS NULL AND l.metric <> 'attainment') AS has_per_request
    FROM (SELECT DISTINCT run_id, slo FROM slo_limits) s
    JOIN points p ON p.run_id = s.run_id AND p.status = 'valid'
    LEFT JOIN counts n ON n.run_id = s.run_id AND n.slo = s.slo AND n.point = p.point
    LEFT JOIN pct pc ON pc.run_id = s.run_id AND pc.slo = s.slo AND pc.point = p.point
    LEFT JOIN goal g ON g.run_id = s.run_id AND g.slo = s.slo
    LEFT JOIN tpot t ON t.run_id = p.run_id AND t.point = p.point
)
SELECT
    run_id, slo, point, requested_rate,
    good::DOUBLE / judged AS attainment,
    coalesce(judged, 0) AS judged_requests, coalesce(good, 0) AS good_requests,
    CASE
        WHEN coalesce(failed, 0) > 0 THEN false
        WHEN attainment_goal IS NOT NULL AND judged > 0 AND good::DOUBLE / judged < attainment_goal THEN false
        WHEN attainment_goal IS NULL AND has_per_request AND judged IS NOT NULL AND NOT per_request_ok THEN false
        WHEN coalesce(unknown, 0) > 0 THEN NULL
        WHEN judged IS NULL THEN NULL
        ELSE true
    END AS meets,
    ttft_p99_ms, tpot_p50_ms, tpot_p99_ms, output_tps
FROM x
ORDER BY run_id, slo, point;

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
