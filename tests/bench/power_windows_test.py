"""bench/power_windows.py on a made-up nvidia-smi log and benchmark log: the
means over each timed window, and joules a step from the step time.
Run: python3 power_windows_test.py."""

import datetime
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "..", "..", "bench", "power_windows.py")
t0 = 1795745000.0
with tempfile.TemporaryDirectory() as d:
    smi, bench = os.path.join(d, "smi.csv"), os.path.join(d, "bench.txt")
    with open(smi, "w") as f:
        f.write("timestamp, index, clocks.sm, clocks.mem, power.draw\n")  # a header is skipped
        for i in range(100):  # 5 s at 50 ms; 600 W before 3 s, 700 W after
            t = t0 + i * 0.05
            ts = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
            stamp = ts.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            watts = 600.0 if i * 0.05 < 3.0 else 700.0
            for g in (0, 1):
                f.write(f"{stamp}, {g}, {1500 + 100 * g}, 2619, {watts}\n")
    with open(bench, "w") as f:
        f.write(f"[rank 0]: single: timed steps from {t0 + 1:.3f} to {t0 + 2:.3f} (unix time)\n"
                "[rank 0]: single-GPU step 50.00 ms peak 10.56 GiB\n"
                f"[rank 0]: fsdp2_nccl: timed steps from {t0 + 3.5:.3f} to {t0 + 4.5:.3f} "
                "(unix time)\n"
                "[rank 0]: fsdp2 nccl step 60.00 ms peak 6.69 GiB  eff 0.833\n"
                f"[rank 1]: fsdp2_nccl: timed steps from {t0:.3f} to {t0 + 5:.3f} (unix time)\n")
    out = subprocess.run([sys.executable, script, smi, bench], capture_output=True, text=True,
                         check=True).stdout
want = ["single (1.00 s): GPU 0: 21 samples, 600 W, SM 1500 MHz, 30.0 J/step; "
        "GPU 1: 21 samples, 600 W, SM 1600 MHz, 30.0 J/step",
        "fsdp2_nccl (1.00 s): GPU 0: 21 samples, 700 W, SM 1500 MHz, 42.0 J/step; "
        "GPU 1: 21 samples, 700 W, SM 1600 MHz, 42.0 J/step"]
if out.splitlines() != want:
    sys.exit(f"power_windows: got\n{out}expected\n" + "\n".join(want))
print("power_windows: ok")
