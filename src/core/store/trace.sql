-- infermatrix store: trace-replay load points (issue 20; docs/load.md "Trace replay"). Applied on every
-- read-write open after load.sql; idempotent. A trace point has its points row (arrival = 'trace') and
-- point_requests rows like any load point; these tables add what the trace said.
-- Tables: trace_points, trace_requests. View: trace_arrivals.

CREATE TABLE IF NOT EXISTS trace_points (
    run_id          VARCHAR NOT NULL,
    point           INTEGER NOT NULL,
    path            VARCHAR,            -- the trace file, absolute
    format          VARCHAR,            -- mooncake | azure | burstgpt
    sha256          VARCHAR,            -- of the file as replayed
    time_scale      DOUBLE,             -- timestamps were multiplied by it
    block_tokens    INTEGER,            -- tokens per Mooncake hash_id block
    in_file         INTEGER,            -- requests in the file
    replayed        INTEGER,            -- requests scheduled
    skipped_failed  INTEGER,            -- BurstGPT rows with 0 response tokens (failed in the trace)
    skipped_empty   INTEGER,            -- other rows with 0 input or 0 output tokens
    skipped_too_long INTEGER,           -- input + output over the engine's max_model_len (it would refuse them)
    cut             INTEGER,            -- requests past max_requests / max_duration_s
    span_s          DOUBLE,             -- scaled time from the first to the last replayed request
    trace_rate      DOUBLE,             -- (replayed − 1) / span_s: the trace's own rate (points.requested_rate)
    prompt_overhead INTEGER,            -- tokens the API adds to a prompt's words (chat template, BOS)
    inexact_prompts INTEGER,            -- prompts whose counted length is not the trace's input length
    shared_prefix_tokens BIGINT,        -- Σ tokens each prompt shares with an earlier one (the trace's hash_ids)
    prompt_tokens   BIGINT,             -- Σ prompt tokens as counted before sending
    PRIMARY KEY (run_id, point)
);

CREATE TABLE IF NOT EXISTS trace_requests (
    run_id          VARCHAR NOT NULL,
    point           INTEGER NOT NULL,
    request_no      INTEGER NOT NULL,   -- joins point_requests
    trace_index     INTEGER,            -- the request's index in the trace (time order, skipped rows counted)
    trace_at_s      DOUBLE,             -- its timestamp in the trace, seconds from the trace's first request
    offset_s        DOUBLE,             -- its scheduled offset: (trace_at_s − first replayed) × time_scale
    trace_input_tokens  INTEGER,        -- the trace's input length (the prompt's target)
    trace_output_tokens INTEGER,        -- the trace's output length (max_tokens sent)
    hash_ids        INTEGER,            -- how many hash_ids the trace gave it (0: none)
    built_prompt_tokens INTEGER,        -- the prompt's length as counted before sending
    shared_prefix_tokens INTEGER        -- prompt tokens it shares with an earlier request (0: none)
);

-- Arrivals over time: per point and second since the point's origin, requests due (scheduled) and sent.
-- A second in which nothing was due or sent has no row.
CREATE OR REPLACE VIEW trace_arrivals AS
WITH origin AS (SELECT run_id, point, origin FROM points WHERE arrival = 'trace' AND origin IS NOT NULL),
due AS (
    SELECT r.run_id, r.point, CAST(floor(r.scheduled - o.origin) AS INTEGER) AS second, count(*) AS requested
    FROM point_requests r JOIN origin o USING (run_id, point) GROUP BY ALL
),
went AS (
    SELECT r.run_id, r.point, CAST(floor(r.sent - o.origin) AS INTEGER) AS second, count(*) AS sent, max(r.lag_ms) AS lag_max_ms
    FROM point_requests r JOIN origin o USING (run_id, point) WHERE r.sent IS NOT NULL GROUP BY ALL
)
SELECT run_id, point, second, coalesce(due.requested, 0) AS requested, coalesce(went.sent, 0) AS sent, went.lag_max_ms
FROM due FULL OUTER JOIN went USING (run_id, point, second)
ORDER BY run_id, point, second;
