#!/usr/bin/env python3
#===- bench/racecheck_torch_threads.py - racecheck vs threaded torch ------===#
#
# No spin call: three threads, each on its own CUDA stream, build small
# tensors, synchronise their stream, then compare them with torch.equal, as
# python/tests/test_cuda.py's multi-stream test used to. Under
#
#   compute-sanitizer --tool racecheck --target-processes all \
#       --report-api-errors no python3 bench/racecheck_torch_threads.py [THREADS]
#
# compute-sanitizer 2025.3.1 with torch 2.11 on the H200 prints "Internal
# Sanitizer Error: Detected a failure to track a kernel launch" and the
# process stops making progress with 3 threads; with 1 it finishes with 0
# hazards (docs/Reliability.md). This is why the multi-stream test compares
# its outputs in the main thread.
#
#===----------------------------------------------------------------------===#
import sys
import threading

import torch


def main(threads):
    start = threading.Barrier(threads)

    def run(t):
        stream = torch.cuda.Stream()
        checks = []
        with torch.cuda.stream(stream):
            start.wait()
            for step in range(60):
                x = torch.arange(16, dtype=torch.float32, device="cuda").reshape(2, 8) + step
                checks.append((x + 1, torch.stack([x[0] + 1, x[1] + 1])))
        stream.synchronize()
        for got, want in checks:
            assert torch.equal(got, want)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(f"{threads} thread(s): done", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
