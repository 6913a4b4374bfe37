-- infermatrix store: open-loop load points (issue 20; docs/load.md). Applied on every read-write open
-- after schema.sql and views.sql; every statement is idempotent. Tables: points, point_requests.
-- View: load_points (contract: its column names and order are public).
-- Times sent/scheduled/first_token/ended are the runner's time.monotonic() seconds, like requests.

CREATE TABLE IF NOT EXISTS points (
    run_id          VARCHAR NOT NULL,
    point           INTEGER NOT NULL,   -- index of the [[load]] entry (resume key)
    label           VARCHAR,            -- e.g. 'poisson@4/s 1K'
    arrival         VARCHAR,            -- poisson | constant | gamma:K
    requested_rate  DOUBLE,             -- R asked for, requests/s
    duration_s      DOUBLE,             -- the span the schedule is drawn over
    context_tokens  INTEGER,
    max_output      INTEGER,
    max_in_flight   INTEGER,            -- NULL: no cap
    seed            BIGINT,
    scheduled       INTEGER,            -- requests in the drawn schedule
    scheduled_rate  DOUBLE,             -- scheduled / duration_s (the draw's own rate)
    sent            INTEGER,            -- requests actually sent
    achieved_rate   DOUBLE,             -- sent / max(duration_s, last send's offset)
    lag_p50_ms      DOUBLE,             -- actual − scheduled send, nearest rank
    lag_p99_ms      DOUBLE,
    lag_max_ms      DOUBLE,
    lag_bound_ms    DOUBLE,             -- max(25 ms, 10 % of 1/R): above it at p99 -> client_bound
    ks_d            DOUBLE,             -- KS of delivered gaps against the requested process (NULL: constant)
    ks_p            DOUBLE,
    queued          INTEGER,            -- requests that waited for the in-flight cap
    max_queue       INTEGER,            -- the most waiting at once
    status          VARCHAR NOT NULL,   -- valid | client_bound | error | interrupted
    reason          VARCHAR,
    completed       INTEGER,            -- requests that ended ok
    failed          INTEGER,
    output_tokens   BIGINT,
    output_tps      DOUBLE,             -- output tokens / (last request's end − the point's origin)
    ttft_p50_ms     DOUBLE,             -- TTFT from the SCHEDULED time (charged for any client lag)
    ttft_p99_ms     DOUBLE,
    ttft_sent_p50_ms DOUBLE,            -- TTFT from the actual send
    ttft_sent_p99_ms DOUBLE,
    e2e_p50_ms      DOUBLE,             -- end − scheduled time
    e2e_p99_ms      DOUBLE,
    origin          DOUBLE,             -- monotonic time of offset 0
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP,
    saved_at        TIMESTAMP,
    PRIMARY KEY (run_id, point)
);

CREATE TABLE IF NOT EXISTS point_requests (
    run_id          VARCHAR NOT NULL,
    point           INTEGER NOT NULL,
    request_no      INTEGER NOT NULL,   -- order in the schedule
    request_id      VARCHAR,            -- X-Request-Id sent (joins the engine's own records)
    scheduled       DOUBLE,             -- monotonic: origin + drawn offset
    sent            DOUBLE,             -- monotonic: handed to its connection, before the write (NULL: never got that far)
    first_token     DOUBLE,
    ended           DOUBLE,
    lag_ms          DOUBLE,             -- sent − scheduled
    queue_ms        DOUBLE,             -- of which waiting for the in-flight cap
    ttft_ms         DOUBLE,             -- first_token − scheduled
    ttft_sent_ms    DOUBLE,             -- first_token − sent
    e2e_ms          DOUBLE,             -- ended − scheduled
    e2e_sent_ms     DOUBLE,             -- ended − sent
    prompt_tokens   INTEGER,
    output_tokens   INTEGER,
    outcome         VARCHAR,
    error           VARCHAR
);

-- v11: time to the first answer (non-reasoning) token, from the scheduled time as ttft_ms (docs/metrics.md, TTFO),
-- and whether a reasoning field carried text in the stream.
ALTER TABLE point_requests ADD COLUMN IF NOT EXISTS ttfo_ms DOUBLE;
ALTER TABLE point_requests ADD COLUMN IF NOT EXISTS reasoning BOOLEAN;
-- v12: the server's own count of the request's reasoning tokens (as requests.reasoning_tokens; NULL: none reported).
ALTER TABLE point_requests ADD COLUMN IF NOT EXISTS reasoning_tokens INTEGER;

CREATE OR REPLACE VIEW load_points AS
SELECT
    run_id, point, arrival, requested_rate, achieved_rate, lag_p50_ms, lag_p99_ms, ks_p, status, reason,
    ttft_p50_ms, ttft_p99_ms, e2e_p50_ms, output_tps, completed,
    label, context_tokens, max_in_flight, scheduled, sent, scheduled_rate, lag_max_ms, lag_bound_ms, ks_d,
    queued, ttft_sent_p50_ms, ttft_sent_p99_ms, e2e_p99_ms
FROM points
ORDER BY run_id, point;
