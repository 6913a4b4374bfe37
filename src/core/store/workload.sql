-- infermatrix store: a workload's own traffic (shared-prefix, multi-turn; issue 20; docs/workloads.md).
-- Applied on every read-write open after load.sql; every statement is idempotent.
-- Tables: workload_passes, workload_requests. Views: prefix_reuse, turns, ttft_by_cached_fraction
-- (contract: their column names and order are public). Times are the runner's time.monotonic() seconds.

CREATE TABLE IF NOT EXISTS workload_passes (
    run_id              VARCHAR NOT NULL,
    workload            VARCHAR NOT NULL,   -- shared-prefix | multi-turn
    params              JSON,               -- the [workload] parameters as run (with the pass's nonce and api)
    block_tokens        INTEGER,            -- the KV block the implied reuse is floored to
    block_source        VARCHAR,            -- engine | config | default
    sessions            INTEGER,            -- groups / conversations
    concurrency         INTEGER,            -- sessions in flight at once
    requests            INTEGER,            -- requests sent
    failed              INTEGER,
    prompt_tokens       BIGINT,             -- sum over requests that got a first token (the server's count)
    expected_cached_tokens BIGINT,          -- sum of each such request's expected cached tokens
    implied_reuse       DOUBLE,             -- expected_cached_tokens / prompt_tokens
    engine_queries      DOUBLE,             -- the engine's prefix-cache queries (tokens) over the pass
    engine_hits         DOUBLE,             -- ... of which hits
    engine_hit_rate     DOUBLE,             -- engine_hits / engine_queries
    engine_note         VARCHAR,            -- why the engine's figures are missing, when they are
    span_start          DOUBLE,             -- monotonic: the counters' read before the first request
    span_end            DOUBLE,             -- ... and after the last one ended
    status              VARCHAR NOT NULL,   -- valid | error | interrupted
    reason              VARCHAR,
    started_at          TIMESTAMP,
    finished_at         TIMESTAMP,
    PRIMARY KEY (run_id)
);

CREATE TABLE IF NOT EXISTS workload_requests (
    run_id              VARCHAR NOT NULL,
    request_no          INTEGER NOT NULL,   -- order in which requests were sent
    session             INTEGER,            -- group / conversation index
    grp                 INTEGER,            -- shared-prefix: group (0-based)
    member              INTEGER,            -- shared-prefix: prompt of the group (0-based; 0 is cold)
    conversation        INTEGER,            -- multi-turn: conversation (0-based)
    turn                INTEGER,            -- multi-turn: turn (1-based)
    request_id          VARCHAR,            -- X-Request-Id sent
    sent                DOUBLE,
    first_token         DOUBLE,
    ended               DOUBLE,
    ttft_ms             DOUBLE,             -- first token − sent
    e2e_ms              DOUBLE,             -- end − sent
    prompt_tokens       INTEGER,            -- the server's usage.prompt_tokens
    shared_tokens       INTEGER,            -- prompt tokens an earlier request of the pass sent token for token
    expected_cached_tokens INTEGER,         -- shared_tokens floored to whole blocks, at most the blocks before the last token
    expected_cached_fraction DOUBLE,        -- expected_cached_tokens / prompt_tokens
    output_tokens       INTEGER,
    outcome             VARCHAR,
    error               VARCHAR,
    reply               VARCHAR,            -- multi-turn: the streamed reply text, carried into the next turn
    messages            JSON,               -- multi-turn from turn 2: the messages sent (the history as the engine got it)
    PRIMARY KEY (run_id, request_no)
);

CREATE OR REPLACE VIEW prefix_reuse AS
SELECT run_id, workload, requests, failed, prompt_tokens, expected_cached_tokens, implied_reuse,
       engine_queries, engine_hits, engine_hit_rate,
       engine_hit_rate - implied_reuse AS difference,
       block_tokens, engine_note, status
FROM workload_passes;

CREATE OR REPLACE VIEW turns AS
SELECT run_id, turn,
       count(*)                                        AS conversations,
       count(*) FILTER (WHERE outcome <> 'ok')         AS failed,
       avg(prompt_tokens)                              AS context_tokens,      -- accumulated context the turn sent
       avg(expected_cached_fraction)                   AS expected_cached_fraction,
       median(ttft_ms) FILTER (WHERE outcome = 'ok')   AS ttft_p50_ms,
       avg(ttft_ms) FILTER (WHERE outcome = 'ok')      AS ttft_mean_ms,
       max(ttft_ms) FILTER (WHERE outcome = 'ok')      AS ttft_max_ms,
       avg(output_tokens)                              AS output_tokens
FROM workload_requests
WHERE turn IS NOT NULL
GROUP BY run_id, turn;

CREATE OR REPLACE VIEW ttft_by_cached_fraction AS
SELECT r.run_id, p.workload,
       CASE WHEN coalesce(r.expected_cached_fraction, 0) = 0 THEN 0
            ELSE least(4, ceil(r.expected_cached_fraction * 4))::INTEGER END AS band,   -- 0: none, k: ((k-1)/4, k/4]
       CASE WHEN coalesce(r.expected_cached_fraction, 0) = 0 THEN '0'
            ELSE printf('%d-%d%%', (least(4, ceil(r.expected_cached_fraction * 4))::INTEGER - 1) * 25,
                        least(4, ceil(r.expected_cached_fraction * 4))::INTEGER * 25) END AS cached_fraction,
       count(*)                          AS requests,
       avg(r.prompt_tokens)              AS prompt_tokens,
       avg(r.expected_cached_fraction)   AS mean_cached_fraction,
       median(r.ttft_ms)                 AS ttft_p50_ms,
       avg(r.ttft_ms)                    AS ttft_mean_ms
FROM workload_requests r JOIN workload_passes p USING (run_id)
WHERE r.outcome = 'ok' AND r.ttft_ms IS NOT NULL
GROUP BY ALL;
