-- infermatrix store: client hosts of cells run on Ray actors (issue 21; docs/distributed.md). Applied on every
-- read-write open after load.sql; idempotent. Table: cell_host_stats (saved with its cell, in the cell's
-- transaction). View: cell_hosts (public: its column names and order).

CREATE TABLE IF NOT EXISTS cell_host_stats (
    run_id                  VARCHAR NOT NULL,
    context_tokens          INTEGER NOT NULL,
    concurrency             INTEGER NOT NULL,
    host                    VARCHAR NOT NULL,   -- hostname/node-id#actor
    actor                   INTEGER,            -- streams i with i mod K = actor
    node_id                 VARCHAR,
    hostname                VARCHAR,
    streams                 INTEGER,
    requests                INTEGER,            -- requests this host sent in the cell
    completed               INTEGER,            -- finished inside the window
    output_tokens           BIGINT,             -- received inside the window
    total_tps               DOUBLE,             -- output_tokens / window seconds
    lag_p99_ms              DOUBLE,             -- the host's event-loop lag, p99 (stream/loop_lag.ClientMonitor)
    lag_max_ms              DOUBLE,
    cpu_pct                 DOUBLE,
    offset_ms               DOUBLE,             -- host clock − coordinator clock at the last estimate
    uncertainty_ms          DOUBLE,             -- ± of the fitted clock model (min-RTT/2, widened by the fit)
    drift_ppm               DOUBLE,             -- slope of the offset over the run's estimates on this host
    drift_uncertainty_ppm   DOUBLE,             -- (first + last estimate's ±) / their span; NULL with one estimate
    rtt_min_ms              DOUBLE,
    clock_estimates         INTEGER,
    PRIMARY KEY (run_id, context_tokens, concurrency, host)
);

CREATE OR REPLACE VIEW cell_hosts AS
SELECT h.run_id, context_label(h.context_tokens) AS context_label, h.context_tokens, h.concurrency, h.host, h.streams,
       h.requests, h.completed, h.output_tokens, h.total_tps, h.lag_p99_ms, h.offset_ms, h.uncertainty_ms, h.drift_ppm,
       h.drift_uncertainty_ppm, h.rtt_min_ms, c.status
FROM cell_host_stats h
LEFT JOIN cells c USING (run_id, context_tokens, concurrency);
