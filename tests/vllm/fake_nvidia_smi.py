"""A stand-in ``nvidia-smi`` for a machine without GPUs: prints what a 4×H200 SXM node prints.

The plain table is a recording's layout (driver 570.124.06, CUDA 12.8); ``--query-gpu=FIELDS
--format=csv,noheader,nounits`` answers per GPU from the same node's values, with power, clock,
memory and utilisation moving with time as they do under load. Unknown fields fail as nvidia-smi
fails. ``FAKE_NVIDIA_SMI_FAIL=1`` makes it fail as it does without a driver.
"""

from __future__ import annotations

import math
import os
import sys
import time

TABLE = """\
Tue Dec  2 14:05:11 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA H200                    On  |   00000000:18:00.0 Off |                    0 |
| N/A   41C    P0            432W /  700W |  120663MiB / 143771MiB |     97%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA H200                    On  |   00000000:2A:00.0 Off |                    0 |
| N/A   39C    P0            418W /  700W |  120663MiB / 143771MiB |     96%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   2  NVIDIA H200                    On  |   00000000:3A:00.0 Off |                    0 |
| N/A   40C    P0            425W /  700W |  120663MiB / 143771MiB |     97%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   3  NVIDIA H200                    On  |   00000000:5D:00.0 Off |                    0 |
| N/A   42C    P0            440W /  700W |  120663MiB / 143771MiB |     98%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0   N/A  N/A          412377      C   VLLM::Worker_TP0                      120654MiB |
|    1   N/A  N/A          412378      C   VLLM::Worker_TP1                      120654MiB |
|    2   N/A  N/A          412379      C   VLLM::Worker_TP2                      120654MiB |
|    3   N/A  N/A          412380      C   VLLM::Worker_TP3                      120654MiB |
+-----------------------------------------------------------------------------------------+
"""

BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]
UUID = [
    "GPU-5f0c1d2e-8a41-7b3c-9e12-0c4d8f6a1b21", "GPU-a1b7e93c-2d55-4f08-b6c1-7e0f3a9d4c62",
    "GPU-3c9e2b71-6f4a-4d18-8b0e-5a2c7d1f9e03", "GPU-e84d0a6f-1b3c-4e27-a95d-2f6b8c0e7a44",
]


def value(field: str, gpu: int, t: float) -> str:
    wave = math.sin(t * 1.3 + gpu)  # load moves a little between samples
    fixed = {
        "index": str(gpu), "name": "NVIDIA H200", "memory.total": "143771", "driver_version": "570.124.06",
        "pci.bus_id": BUS[gpu], "uuid": UUID[gpu], "count": "4", "power.limit": "700.00",
        "memory.used": str(120663 + int(40 * wave)), "power.draw": f"{430 + 25 * wave:.2f}",
        "clocks.sm": str(1980 - int(15 * abs(wave))), "utilization.gpu": str(96 + int(2 * wave)),
        "temperature.gpu": str(40 + gpu % 3), "clocks.mem": "3201", "pstate": "P0",
        "utilization.memory": str(61 + int(5 * wave)),
    }
    if field not in fixed:
        raise KeyError(field)
    return fixed[field]


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_NVIDIA_SMI_FAIL"):
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")  # fmt: skip
        return 9
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is None:
        sys.stdout.write(TABLE)
        return 0
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "csv")
    fields = [f.strip() for f in query.split(",")]
    t = time.time()
    try:
        rows = [", ".join(value(f, gpu, t) for f in fields) for gpu in range(4)]
    except KeyError as exc:
        print(f'Field "{exc.args[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    if "noheader" not in fmt:
        print(", ".join(fields))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
