-- infermatrix store: burst points (issue 31 item 1; docs/load.md "Bursts", docs/metrics.md "Bursts"). Applied on every
-- open and upgrade after load.sql (its view reads points); idempotent. A burst has its points row (arrival = 'burst',
-- max_in_flight = its concurrency, latencies from each request's send) and point_requests rows like any load point;
-- this table adds what a burst is timed by. Table: bursts. View: burst_points (contract: its column names and order).
-- Times are the runner's time.monotonic() seconds, like point_requests.

CREATE TABLE IF NOT EXISTS bursts (
    run_id              VARCHAR NOT NULL,
    point               INTEGER NOT NULL,
    requests            INTEGER,            -- requests in the burst
    concurrency         INTEGER,            -- the cap on requests in flight (requests when all go at once)
    natural_stop        BOOLEAN,            -- sent without ignore_eos: each request stops at its own length
    first_sent          DOUBLE,             -- monotonic: the first request's send (after connecting, before its write): the span's start
    last_end            DOUBLE,             -- monotonic: the last request's end (its last token read, the stream closed)
    duration_s          DOUBLE,             -- last_end - first_sent
    tail_start          DOUBLE,             -- the first request end after the last request was sent: from then on
                                            -- fewer than `concurrency` are in flight and none waits
    tail_s              DOUBLE,             -- last_end - tail_start
    steady_request_rate DOUBLE,             -- requests ended by tail_start / (tail_start - first_sent)
    steady_output_tps   DOUBLE,             -- output tokens read by tail_start / (tail_start - first_sent)
    ttfo_p50_ms         DOUBLE,             -- time to the first answer token from the send, nearest rank (docs/metrics.md, TTFO)
    ttfo_p99_ms         DOUBLE,
    PRIMARY KEY (run_id, point)
);

-- One row per burst point. request_rate and output_tps are over the whole duration (first sent -> last end), tail
-- included; TTFT and e2e count from each request's send (its wait for a slot is not latency: queue_ms), nearest
-- rank over the requests that ended ok. After the contract columns: the tail and the rates before it.
CREATE OR REPLACE VIEW burst_points AS
SELECT
    p.run_id, p.point, b.requests, b.concurrency, p.context_tokens, p.status, b.duration_s,
    p.completed / nullif(b.duration_s, 0) AS request_rate, p.output_tps,
    p.ttft_p50_ms, p.ttft_p99_ms, p.e2e_p50_ms, p.e2e_p99_ms, p.completed,
    p.failed, p.reason, p.label, p.max_output, b.natural_stop, p.output_tokens,
    b.tail_s, b.tail_s / nullif(b.duration_s, 0) AS tail_share, b.steady_request_rate, b.steady_output_tps,
    b.ttfo_p50_ms, b.ttfo_p99_ms, p.lag_p99_ms, p.max_queue, b.first_sent, b.last_end
FROM points p
JOIN bursts b ON b.run_id = p.run_id AND b.point = p.point
WHERE p.arrival = 'burst'
ORDER BY p.run_id, p.point;
