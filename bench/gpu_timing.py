"""Timing helpers shared by the PyTorch side-by-side bench scripts in bench/.

graph_time: a CUDA graph of `calls` calls of fn (captured after one eager
warm-up on a side stream), `warm` untimed replays, then the median over
`replays` replays between CUDA events, divided by `calls`: us per call.
eager_time: the median of `reps` eager calls between CUDA events (after 10
untimed ones): us per call, launch latency included.
"""

import statistics

import torch


def graph_time(fn, calls=20, replays=50, warm=5):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(warm):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / calls)
    return statistics.median(times)


def eager_time(fn, reps=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)
