-- infermatrix store: SLO, frontier, cost and engine-statistics views (docs/slo.md, docs/metrics.md).
-- Re-created on every open and upgrade, after views.sql (they read decode_matrix, nearest_rank(), wilson_bound()).
--
-- Contract views (DESIGN.md §7): slo_cells, slo_capacity, frontier.
-- Helper views (not contract): request_latencies, slo_requests, run_gpus, cell_engine_stats.
-- Macros: request_tpot_ms(), request_tps(), slo_request_verdicts(), slo_verdicts() -- the one SLO judgement, also of
-- open-loop points (slo_search.sql).

-- A request's TPOT (ms per output token after the first) and decode rate (tokens/s after the first), as the SLO
-- judges them (docs/metrics.md, "SLOs"): (ended - first token) / (output tokens - 1); NULL for a request with fewer
-- than 2 output tokens or no time between its first and last token. One definition for cells (request_latencies)
-- and open-loop points (point_latencies in slo_search.sql).
CREATE OR REPLACE MACRO request_tpot_ms(_output_tokens, _first_token, _ended) AS
    CASE WHEN _output_tokens > 1 AND _ended > _first_token THEN (_ended - _first_token) * 1000.0 / (_output_tokens - 1) END;
CREATE OR REPLACE MACRO request_tps(_output_tokens, _first_token, _ended) AS
    CASE WHEN _output_tokens > 1 AND _ended > _first_token THEN (_output_tokens - 1) / (_ended - _first_token) END;

-- Every request of a valid cell that the SLO judges: it ended inside the cell's window and was not closed
-- by the client at the window's end (cancelled). A failed request is judged (and is not good).
-- tpot_ms and tps are NULL for a request with fewer than 2 output tokens: it is judged on the rest.
-- After the columns above, those slo_verdicts() reads of every population: point (NULL: a cell's request) and
-- finished (outcome ok with a finish reason).
CREATE OR REPLACE VIEW request_latencies AS
SELECT
    q.run_id, q.context_tokens, q.concurrency, q.request_no, q.outcome, q.finish_reason, q.output_tokens,
    q.ttft_ms,
    request_tpot_ms(q.output_tokens, q.first_token, q.ended) AS tpot_ms,
    (q.ended - q.sent) * 1000.0 AS e2e_ms,
    request_tps(q.output_tokens, q.first_token, q.ended) AS tps,
    NULL::INTEGER AS point,
    q.outcome = 'ok' AND q.finish_reason IS NOT NULL AS finished,
    q.ttfo_ms  -- v11: time to the first answer token (docs/metrics.md, TTFO); NULL: no answer token came
FROM requests q
JOIN cells c ON c.run_id = q.run_id AND c.context_tokens = q.context_tokens AND c.concurrency = q.concurrency
LEFT JOIN cell_repeats p ON p.run_id = q.run_id AND p.context_tokens = q.context_tokens AND p.concurrency = q.concurrency
    AND p.repeat = q.repeat  -- v9: a request of a repeated cell is judged by its own repeat's window
WHERE c.status = 'valid' AND q.outcome <> 'cancelled' AND q.ended IS NOT NULL
  AND q.ended >= coalesce(p.window_start, c.window_start) AND q.ended <= coalesce(p.window_end, c.window_end);

-- THE SLO judgement (docs/slo.md, docs/metrics.md "SLOs"), one definition for decode cells (slo_cells, over
-- request_latencies) and open-loop points (slo_points in slo_search.sql, over point_latencies). `population`
-- names a view of judged requests with the columns run_id, context_tokens, concurrency, point, request_no,
-- finished, output_tokens, ttft_ms, ttfo_ms, tpot_ms, e2e_ms, tps; a cell is (context_tokens, concurrency) with point NULL,
-- a point the other way round.
--
-- Per (SLO, judged request): good when it finished and meets every limit of the SLO, whatever the limit's
-- percentile; per_request_ok when it meets every limit without a percentile (those hold for every request).
CREATE OR REPLACE MACRO slo_request_verdicts(population) AS TABLE
WITH judged AS (
    SELECT l.run_id, l.slo, r.context_tokens, r.concurrency, r.point, r.request_no, r.output_tokens, r.finished,
           l.percentile,
           CASE l.metric
               WHEN 'ttft_ms' THEN coalesce(r.ttft_ms <= l.limit_value, false)
               WHEN 'ttfo_ms' THEN coalesce(r.ttfo_ms <= l.limit_value, false)  -- no answer token: not good
               WHEN 'e2e_ms' THEN coalesce(r.e2e_ms <= l.limit_value, false)
               WHEN 'tpot_ms' THEN coalesce(r.tpot_ms <= l.limit_value, true)  -- one token: no TPOT to judge
               WHEN 'tps' THEN coalesce(r.tps >= l.limit_value, true)
           END AS ok
    FROM slo_limits l
    JOIN query_table(population) r ON r.run_id = l.run_id
    WHERE l.metric <> 'attainment'
)
SELECT run_id, slo, context_tokens, concurrency, point, request_no, any_value(output_tokens) AS output_tokens,
       bool_and(finished) AND bool_and(ok) AS good,
       coalesce(bool_and(ok) FILTER (WHERE percentile IS NULL), true) AS per_request_ok
FROM judged
GROUP BY run_id, slo, context_tokens, concurrency, point, request_no;

-- Per (SLO, cell or point) with judged requests: the counts, and whether it meets the SLO. A percentile limit
-- is the nearest-rank percentile (the value at rank ceil(P/100 x n)) over the SAME judged requests, those that
-- finished: TTFT, e2e and TPOT = (last token - first token) / (output tokens - 1), per request (docs/slo.md)
-- (one-token requests have none); tps_p<P>_min asks that P % of them reach the rate (ranked fastest first). So a
-- cell or point whose judged requests are all good cannot fail a percentile limit: each value is within it.
-- meets: false when a percentile limit fails, or attainment is below the goal (with one), or (without one) a
-- limit without a percentile fails for some request; NULL when a percentile has no value to judge; else true.
-- Also its TTFT p99 and TPOT p50/p99 over the same requests (what the search stores with each probe).
CREATE OR REPLACE MACRO slo_verdicts(population) AS TABLE
WITH counts AS (
    SELECT run_id, slo, context_tokens, concurrency, point,
           count(*) AS judged, count(*) FILTER (WHERE good) AS good,
           coalesce(sum(output_tokens) FILTER (WHERE good), 0) AS good_tokens,
           bool_and(per_request_ok) AS per_request_ok
    FROM slo_request_verdicts(population) GROUP BY ALL
), lists AS (  -- every unit with a judged request has a row here, even when none finished (empty lists: unknown)
    SELECT run_id, context_tokens, concurrency, point,
           list_sort(list(ttft_ms) FILTER (WHERE finished AND ttft_ms IS NOT NULL)) AS ttft,
           list_sort(list(ttfo_ms) FILTER (WHERE finished AND ttfo_ms IS NOT NULL)) AS ttfo,
           list_sort(list(tpot_ms) FILTER (WHERE finished AND tpot_ms IS NOT NULL)) AS tpot,
           list_sort(list(e2e_ms) FILTER (WHERE finished AND e2e_ms IS NOT NULL)) AS e2e,
           list_reverse_sort(list(tps) FILTER (WHERE finished AND tps IS NOT NULL)) AS tps
    FROM query_table(population) GROUP BY ALL
), pct AS (
    SELECT run_id, slo, context_tokens, concurrency, point,
           count(*) FILTER (WHERE NOT ok) AS failed, count(*) FILTER (WHERE ok IS NULL) AS unknown
    FROM (
        SELECT x.run_id, l.slo, x.context_tokens, x.concurrency, x.point,
               CASE l.metric
                   WHEN 'ttft_ms' THEN nearest_rank(x.ttft, l.percentile / 100.0) <= l.limit_value
                   WHEN 'ttfo_ms' THEN nearest_rank(x.ttfo, l.percentile / 100.0) <= l.limit_value
                   WHEN 'tpot_ms' THEN nearest_rank(x.tpot, l.percentile / 100.0) <= l.limit_value
                   WHEN 'e2e_ms' THEN nearest_rank(x.e2e, l.percentile / 100.0) <= l.limit_value
                   WHEN 'tps' THEN nearest_rank(x.tps, l.percentile / 100.0) >= l.limit_value
               END AS ok  -- NULL for an empty list (indexing past the end)
        FROM lists x JOIN slo_limits l ON l.run_id = x.run_id
        WHERE l.percentile IS NOT NULL AND l.metric <> 'attainment'
    ) GROUP BY ALL
), rules AS (
    SELECT run_id, slo, max(limit_value) FILTER (WHERE metric = 'attainment') AS attainment_goal,
           bool_or(percentile IS NULL AND metric <> 'attainment') AS has_per_request
    FROM slo_limits GROUP BY ALL
)
SELECT n.run_id, n.slo, n.context_tokens, n.concurrency, n.point, n.judged, n.good, n.good_tokens,
       CASE
           WHEN coalesce(pc.failed, 0) > 0 THEN false
           WHEN g.attainment_goal IS NOT NULL AND n.good::DOUBLE / n.judged < g.attainment_goal THEN false
           WHEN g.attainment_goal IS NULL AND g.has_per_request AND NOT n.per_request_ok THEN false
           WHEN coalesce(pc.unknown, 0) > 0 THEN NULL
           ELSE true
       END AS meets,
       nearest_rank(x.ttft, 0.99) AS ttft_p99_ms,
       nearest_rank(x.tpot, 0.5) AS tpot_p50_ms,
       nearest_rank(x.tpot, 0.99) AS tpot_p99_ms
FROM counts n
JOIN rules g ON g.run_id = n.run_id AND g.slo = n.slo
JOIN lists x ON x.run_id = n.run_id AND x.context_tokens IS NOT DISTINCT FROM n.context_tokens
    AND x.concurrency IS NOT DISTINCT FROM n.concurrency AND x.point IS NOT DISTINCT FROM n.point
LEFT JOIN pct pc ON pc.run_id = n.run_id AND pc.slo = n.slo AND pc.context_tokens IS NOT DISTINCT FROM n.context_tokens
    AND pc.concurrency IS NOT DISTINCT FROM n.concurrency AND pc.point IS NOT DISTINCT FROM n.point;

-- One row per (SLO, judged request of a cell) (helper view; the judgement itself is slo_request_verdicts()).
CREATE OR REPLACE VIEW slo_requests AS
SELECT run_id, slo, context_tokens, concurrency, request_no, output_tokens, good, per_request_ok
FROM slo_request_verdicts('request_latencies');

-- Per valid cell and SLO: attainment (good / judged requests) with its 95 % Wilson score interval (wilson_bound()), request
-- and token goodput (good requests, and their output tokens, per second of the window), and whether the cell
-- meets the SLO (slo_verdicts(): every limit judged on the cell's judged requests, percentiles included).
-- meets is NULL when a limit cannot be judged (no judged requests: an imported page keeps none) and none fails.
-- After the contract columns: the counts behind the shares, the cell's tokens, and the TTFT p99 and TPOT p50/p99
-- over its judged requests (the figures a percentile limit is judged on).
CREATE OR REPLACE VIEW slo_cells AS
WITH cell_verdicts AS (
    SELECT d.run_id, s.slo, d.context_label, d.context_tokens, d.concurrency, d.measured_s,
           v.judged, v.good, v.good_tokens, v.meets, v.ttft_p99_ms, v.tpot_p50_ms, v.tpot_p99_ms
    FROM (SELECT DISTINCT run_id, slo FROM slo_limits) s
    JOIN decode_matrix d ON d.run_id = s.run_id AND d.status = 'valid'
    LEFT JOIN slo_verdicts('request_latencies') v ON v.run_id = d.run_id AND v.slo = s.slo
        AND v.context_tokens = d.context_tokens AND v.concurrency = d.concurrency
)
SELECT
    run_id, slo, context_label, concurrency,
    good::DOUBLE / judged AS attainment,
    wilson_bound(good, judged, -1) AS attainment_lo,
    wilson_bound(good, judged, 1) AS attainment_hi,
    -- NULL when no request was judged (an imported page keeps no request records)
    CASE WHEN judged IS NOT NULL THEN good / measured_s END AS request_goodput,
    CASE WHEN judged IS NOT NULL THEN good_tokens / measured_s END AS token_goodput,
    meets,
    -- after the contract columns: the counts behind the shares, the cell's tokens, the judged requests' percentiles
    context_tokens, coalesce(judged, 0) AS judged_requests, coalesce(good, 0) AS good_requests,
    ttft_p99_ms, tpot_p50_ms, tpot_p99_ms
FROM cell_verdicts
ORDER BY run_id, slo, context_tokens, concurrency;

-- GPUs a run's engine used: its parallelism as the engine plugin reports it (tensor x pipeline x data
-- parallel sizes in runs.engine_extra: tensor/pipeline/data_parallel_size, or tp/pp/dp_size), else the config's hardware.gpus (or hardware.gpu_count), else the
-- hardware row's gpu_count (an imported page's GPU count). NULL when none says.
-- gpu_hour_usd: the price a report was given for itself (`report/compare --gpu-hour-price`, the session variable
-- infermatrix_gpu_hour_usd: nothing stored), else the run's stored price (run_costs), else its config's
-- hardware.gpu_hour_usd; gpu_hour_source says which, stored_gpu_hour_usd is what the run itself holds (docs/slo.md).
CREATE OR REPLACE VIEW run_gpus AS
WITH src AS (
    SELECT r.run_id,
           coalesce(TRY_CAST(json_extract_string(r.engine_extra, '$.tensor_parallel_size') AS INTEGER),
                    TRY_CAST(json_extract_string(r.engine_extra, '$.tp_size') AS INTEGER)) AS tp,
           coalesce(TRY_CAST(json_extract_string(r.engine_extra, '$.pipeline_parallel_size') AS INTEGER),
                    TRY_CAST(json_extract_string(r.engine_extra, '$.pp_size') AS INTEGER)) AS pp,
           coalesce(TRY_CAST(json_extract_string(r.engine_extra, '$.data_parallel_size') AS INTEGER),
                    TRY_CAST(json_extract_string(r.engine_extra, '$.dp_size') AS INTEGER)) AS dp,
           coalesce(TRY_CAST(json_extract_string(r.config, '$.hardware.gpus') AS INTEGER),
                    TRY_CAST(json_extract_string(r.config, '$.hardware.gpu_count') AS INTEGER)) AS cfg,
           TRY_CAST(json_extract_string(r.hardware, '$.gpu_count') AS INTEGER) AS hw,
           k.gpu_hour_usd AS stored_usd,
           TRY_CAST(json_extract_string(r.config, '$.hardware.gpu_hour_usd') AS DOUBLE) AS config_usd,
           TRY_CAST(getvariable('infermatrix_gpu_hour_usd') AS DOUBLE) AS report_usd
    FROM runs r LEFT JOIN run_costs k ON k.run_id = r.run_id
)
SELECT run_id,
       CASE WHEN tp > 0 THEN tp * coalesce(nullif(pp, 0), 1) * coalesce(nullif(dp, 0), 1)
            WHEN cfg > 0 THEN cfg WHEN hw > 0 THEN hw END AS gpus,
       CASE WHEN tp > 0 THEN 'engine parallelism' WHEN cfg > 0 THEN 'config hardware' WHEN hw > 0 THEN 'hardware' END AS gpus_source,
       coalesce(report_usd, stored_usd, config_usd) AS gpu_hour_usd,
       CASE WHEN report_usd IS NOT NULL THEN 'report' WHEN stored_usd IS NOT NULL THEN 'stored'
            WHEN config_usd IS NOT NULL THEN 'config' END AS gpu_hour_source,
       coalesce(stored_usd, config_usd) AS stored_gpu_hour_usd
FROM src;

-- Per SLO and context: the largest concurrency whose cell meets the SLO, and its throughput.
CREATE OR REPLACE VIEW slo_capacity AS
WITH best AS (
    SELECT run_id, slo, context_tokens, any_value(context_label) AS context_label,
           max(concurrency) FILTER (WHERE meets) AS max_concurrency_meeting
    FROM slo_cells GROUP BY run_id, slo, context_tokens
)
SELECT b.run_id, b.slo, b.context_label, b.max_concurrency_meeting,
       d.total_tps AS total_tps_at_max,
       d.total_tps / g.gpus AS tps_per_gpu_at_max,
       b.context_tokens
FROM best b
LEFT JOIN decode_matrix d ON d.run_id = b.run_id AND d.context_tokens = b.context_tokens AND d.concurrency = b.max_concurrency_meeting
LEFT JOIN run_gpus g ON g.run_id = b.run_id
ORDER BY b.run_id, b.slo, b.context_tokens;

-- Throughput per GPU against interactivity (tok/s per user: per_request_tps), per run and context.
-- on_frontier: no other valid cell of the same run and context has at least as much of both and more of one.
-- usd_per_mtok: dollars per million output tokens = gpu_hour_usd / (tps_per_gpu x 3600 / 1e6), plus the energy's
-- (energy_usd_per_mtok) where the config gives hardware.kwh_usd and NVML measured the cell (v11, issue 32; either
-- part alone when only it is known);
-- usd_per_mtok_total (after the contract columns): per million prompt + output tokens, with input_tps the prompt
-- tokens of the requests sent inside the window per second (a warm prompt counts whole, as the tools that
-- publish total-token costs count it).
CREATE OR REPLACE VIEW frontier AS
WITH input AS (
    SELECT q.run_id, q.context_tokens, q.concurrency, sum(q.prompt_tokens) AS prompt_tokens
    FROM requests q
    JOIN cells c ON c.run_id = q.run_id AND c.context_tokens = q.context_tokens AND c.concurrency = q.concurrency
    LEFT JOIN cell_repeats p ON p.run_id = q.run_id AND p.context_tokens = q.context_tokens AND p.concurrency = q.concurrency
        AND p.repeat = q.repeat  -- v9: a request of a repeated cell is judged by its own repeat's window
    WHERE q.sent >= coalesce(p.window_start, c.window_start) AND q.sent <= coalesce(p.window_end, c.window_end)
    GROUP BY ALL
), pts AS (
    SELECT d.run_id, d.engine, d.context_label, d.context_tokens, d.concurrency,
           d.total_tps / g.gpus AS tps_per_gpu, d.per_request_tps AS tps_per_user, g.gpus, g.gpu_hour_usd,
           i.prompt_tokens / d.measured_s AS input_tps, d.total_tps
           , e.j_per_mtok, e.j_per_mtok / 3.6e6 * TRY_CAST(json_extract_string(r.config, '$.hardware.kwh_usd') AS DOUBLE) AS energy_usd_per_mtok
    FROM decode_matrix d
    LEFT JOIN run_gpus g ON g.run_id = d.run_id
    LEFT JOIN input i ON i.run_id = d.run_id AND i.context_tokens = d.context_tokens AND i.concurrency = d.concurrency
    LEFT JOIN gpu_cells e ON e.run_id = d.run_id AND e.context_tokens = d.context_tokens AND e.concurrency = d.concurrency
    LEFT JOIN runs r ON r.run_id = d.run_id
    WHERE d.status = 'valid' AND d.total_tps IS NOT NULL AND d.per_request_tps IS NOT NULL
)
SELECT a.run_id, a.engine, a.context_label, a.concurrency, a.tps_per_gpu, a.tps_per_user,
       CASE WHEN a.tps_per_gpu IS NOT NULL THEN NOT EXISTS (
           SELECT 1 FROM pts b
           WHERE b.run_id = a.run_id AND b.context_tokens = a.context_tokens
             AND b.tps_per_gpu >= a.tps_per_gpu AND b.tps_per_user >= a.tps_per_user
             AND (b.tps_per_gpu > a.tps_per_gpu OR b.tps_per_user > a.tps_per_user)
       ) END AS on_frontier,
       CASE WHEN a.gpu_hour_usd IS NOT NULL OR a.energy_usd_per_mtok IS NOT NULL THEN
           coalesce(a.gpu_hour_usd / (a.tps_per_gpu * 3600 / 1e6), 0) + coalesce(a.energy_usd_per_mtok, 0) END AS usd_per_mtok,
       a.context_tokens, a.gpus, a.gpu_hour_usd, a.input_tps,
       a.gpu_hour_usd / ((a.total_tps + a.input_tps) / a.gpus * 3600 / 1e6) AS usd_per_mtok_total,
       a.j_per_mtok AS joules_per_mtok, a.energy_usd_per_mtok
FROM pts a
ORDER BY a.run_id, a.context_tokens, a.concurrency;

-- What the engine's own counters say each decode cell and each prefill point did (docs/metrics.md, engine
-- statistics): counter differences over the cell's span (cells.flags.engine_counters) or over the cold probes
-- of a prefill point (prefill.engine_counters). acceptance_rate = accepted / draft tokens; mean acceptance
-- length = 1 + accepted / drafts; acceptance_per_position[i] = accepted at draft position i / drafts;
-- prefix_cache_hit_rate = hits / queries (tokens). NULL with the reason in spec_note / prefix_cache_note.
CREATE OR REPLACE VIEW cell_engine_stats AS
WITH src AS (
    SELECT run_id, 'decode' AS phase, context_tokens, concurrency, status, json_extract(flags, '$.engine_counters') AS j
    FROM cells
    UNION ALL
    SELECT run_id, 'prefill', context_tokens, NULL, status, engine_counters FROM prefill
), v AS (
    SELECT run_id, phase, context_tokens, concurrency, status, j,
           TRY_CAST(json_extract_string(j, '$.spec_drafts') AS DOUBLE) AS drafts,
           TRY_CAST(json_extract_string(j, '$.spec_draft_tokens') AS DOUBLE) AS draft_tokens,
           TRY_CAST(json_extract_string(j, '$.spec_accepted_tokens') AS DOUBLE) AS accepted,
           TRY_CAST(json_extract(j, '$.spec_accepted_per_pos') AS DOUBLE[]) AS per_pos,
           TRY_CAST(json_extract_string(j, '$.prefix_cache_queries') AS DOUBLE) AS queries,
           TRY_CAST(json_extract_string(j, '$.prefix_cache_hits') AS DOUBLE) AS hits
    FROM src
)
SELECT
    run_id, phase, context_label(context_tokens) AS context_label, context_tokens, concurrency, status,
    accepted / nullif(draft_tokens, 0) AS acceptance_rate,
    1 + accepted / nullif(drafts, 0) AS mean_acceptance_length,
    CASE WHEN drafts > 0 THEN list_transform(per_pos, lambda x: x / drafts) END AS acceptance_per_position,
    hits / nullif(queries, 0) AS prefix_cache_hit_rate,
    CASE WHEN j IS NULL THEN 'not recorded (measured before engine statistics existed)'
         ELSE json_extract_string(j, '$.spec_note') END AS spec_note,
    CASE WHEN j IS NULL THEN 'not recorded (measured before engine statistics existed)'
         ELSE json_extract_string(j, '$.prefix_cache_note') END AS prefix_cache_note,
    drafts AS spec_drafts, draft_tokens AS spec_draft_tokens, accepted AS spec_accepted_tokens,
    queries AS prefix_cache_queries, hits AS prefix_cache_hits
FROM v
ORDER BY run_id, phase DESC, context_tokens, concurrency;
