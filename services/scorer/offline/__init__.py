"""Offline scoring: whole files of prompts, in this process on a device (`jobs`: many prompts a forward) or through a
running scorer (`bench_rewards`: many prompts a ScoreBatch call); the rewards files `cheems eval` reads.
Imports `cheems` and the scorer's core (`tokenization`, `backends`' forward, `client`); never the gRPC/HTTP edges."""
