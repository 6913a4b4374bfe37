-- infermatrix store: interference points (issue 31 item 3; docs/load.md "Interference", docs/metrics.md "Interference").
-- Applied on every open and upgrade after load.sql (its view reads points); idempotent. An interference point has its
-- points row (arrival = 'mixed', context_tokens = the prefills' prompt tokens, TTFT over the prefills) and point_requests
-- rows (the decodes, the prefills, the alone prefill); this table adds the decoders' token gaps.
-- Table: interference_points. View: interference (contract: its first ten column names and order).
-- Times are the runner's time.monotonic() seconds, like point_requests.

CREATE TABLE IF NOT EXISTS interference_points (
    run_id                VARCHAR NOT NULL,
    point                 INTEGER NOT NULL,
    decode_streams        INTEGER,    -- decode streams running through the point
    decode_context        INTEGER,    -- their prompt tokens
    prefills              INTEGER,    -- prefills asked for
    prefill_rate          DOUBLE,     -- prefills per second; NULL: one at a time
    warmup_s              DOUBLE,
    window_s              DOUBLE,
    window_start          DOUBLE,     -- monotonic: the alone window
    window_end            DOUBLE,
    tbt_alone_ms          DOUBLE,     -- median decoder gap inside the alone window (nearest rank)
    tbt_alone_p99_ms      DOUBLE,
    alone_gaps            INTEGER,
    tbt_during_ms         DOUBLE,     -- median decoder gap overlapping a prefill's send -> first token
    tbt_p99_during_ms     DOUBLE,
    stall_max_ms          DOUBLE,     -- the longest such gap
    during_gaps           INTEGER,
    prefill_ttft_ms       DOUBLE,     -- median prefill TTFT with the decodes running, from its send
    prefill_ttft_max_ms   DOUBLE,
    prefill_ttft_alone_ms DOUBLE,     -- TTFT of the same context sent with nothing else running
    PRIMARY KEY (run_id, point)
);

-- One row per interference point. After the contract columns: the stall and TTFT ratios, the gap counts, the setup.
CREATE OR REPLACE VIEW interference AS
SELECT
    p.run_id, p.point, i.decode_streams, p.context_tokens AS prefill_context, i.tbt_alone_ms, i.tbt_during_ms,
    i.tbt_p99_during_ms, i.stall_max_ms, i.prefill_ttft_ms, i.prefill_ttft_alone_ms,
    p.status, p.reason, p.label, i.decode_context, i.prefills, i.prefill_rate,
    i.tbt_during_ms / nullif(i.tbt_alone_ms, 0) AS tbt_slowdown, i.stall_max_ms / nullif(i.tbt_alone_ms, 0) AS stall_ratio,
    i.prefill_ttft_ms / nullif(i.prefill_ttft_alone_ms, 0) AS ttft_slowdown, i.tbt_alone_p99_ms, i.prefill_ttft_max_ms,
    i.alone_gaps, i.during_gaps, i.warmup_s, i.window_s, i.window_start, i.window_end
FROM points p
JOIN interference_points i ON i.run_id = p.run_id AND i.point = p.point
WHERE p.arrival = 'mixed'
ORDER BY p.run_id, p.point;
