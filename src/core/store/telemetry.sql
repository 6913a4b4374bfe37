-- infermatrix store: GPU telemetry samples per cell (core/engine/telemetry.py samples them). Applied on every open and
-- upgrade (connect.SCHEMA_FILES); idempotent. Table: gpu_samples (one cell's samples saved in one statement,
-- store/telemetry.py). View: gpu_cell_summary (per cell and GPU: mean power, SM clock and utilisation, peaks).
-- A cell is (context_tokens, concurrency); a prefill probe has concurrency 0.

CREATE TABLE IF NOT EXISTS gpu_samples (
    run_id VARCHAR NOT NULL,
    context_tokens INTEGER NOT NULL,
    concurrency INTEGER NOT NULL,
    t DOUBLE NOT NULL,            -- wall-clock epoch seconds
    t_mono DOUBLE,                -- time.monotonic(), the clock of cells.window_start/window_end
    gpu INTEGER NOT NULL,
    power_w DOUBLE,
    sm_clock_mhz DOUBLE,
    memory_used_mib DOUBLE,
    utilization_pct DOUBLE,
    temperature_c DOUBLE
);

CREATE OR REPLACE VIEW gpu_cell_summary AS
SELECT run_id, context_tokens, concurrency, gpu, count(*) AS samples,
       avg(power_w) AS power_w, avg(sm_clock_mhz) AS sm_clock_mhz, avg(utilization_pct) AS utilization_pct,
       max(memory_used_mib) AS memory_used_mib_max, max(temperature_c) AS temperature_c_max
FROM gpu_samples GROUP BY ALL;
