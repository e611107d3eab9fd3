#!/usr/bin/env bash
# The whole loop on one machine, on embedded defaults (SQLite, the embedded Kafka broker, Triton via
# PyTriton, CPU): ingest -> simulated human and AI annotation -> resolve -> distant supervision and
# length debias -> train the tiny RM -> serve it -> evaluate through Kafka -> report.
# Every step is an ordinary `cheems` command, runnable on its own. Writes out/demo/; safe to rerun.
# Note: the sample is tiny and the demo evaluates on the prompts it annotated, so the figures show
# the plumbing working, not how well such an RM generalises.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
OUT=${OUT:-out/demo}
EPOCHS=${EPOCHS:-6}
rm -rf "$OUT" && mkdir -p "$OUT"
DB="sqlite:///$OUT/cheems.db"
step() { printf '\n== %s\n' "$*"; }
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; return 0; }
trap cleanup EXIT

step "ingest the bundled sample into $DB"
"$BIN/cheems" ingest data/sample/open.jsonl --db "$DB"
"$BIN/cheems" ingest data/sample/human.jsonl --db "$DB"

step "simulated human triple-wise annotation of the open subset, resolved with Algorithm 1"
"$BIN/cheems" annotate simulate data/sample/open.jsonl --out "$OUT/human_raw.jsonl" --kind human --noise 0.1
"$BIN/cheems" resolve "$OUT/human_raw.jsonl" --out "$OUT/human_bench.jsonl" --stats "$OUT/resolve_stats.json"

step "an RM trained on the human-resolved data (for distant supervision)"
"$BIN/cheems" init-model --out "$OUT/models/tiny"
"$BIN/cheems" train --set model="$OUT/models/tiny" --set train_files="$OUT/human_bench.jsonl" --set eval_files=[] \
    --set out_dir="$OUT/rm-human" --set epochs=8 --set progress=false
"$BIN/cheems" rewards data/sample/human.jsonl --model "$OUT/rm-human/model" --out "$OUT/ai_rewards.jsonl"

step "simulated AI pairwise verdicts on the human subset, filtered by distant supervision"
"$BIN/cheems" annotate simulate data/sample/human.jsonl --out "$OUT/ai_raw.jsonl" --kind ai --noise 0.3
"$BIN/cheems" annotate distant "$OUT/ai_raw.jsonl" --rewards "$OUT/ai_rewards.jsonl" --out "$OUT/ai_bench.jsonl"
"$BIN/cheems" annotate export "$OUT/ai_bench.jsonl" --human "$OUT/human_bench.jsonl" --out "$OUT/preference.jsonl"

step "train the RM on the combined, length-debiased preference data"
"$BIN/cheems" train --set model="$OUT/models/tiny" --set train_files="$OUT/preference.jsonl" \
    --set eval_files=[] --set out_dir="$OUT/rm" --set epochs="$EPOCHS" --set progress=false

step "serve it (gRPC -> Triton) and evaluate through Kafka"
port=$("$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN/cheems" serve --model "$OUT/rm/model" --grpc-port "$port" --http-port -1 --host 127.0.0.1 > "$OUT/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q '^serving:' "$OUT/serve.log" && break; kill -0 "$server" || { cat "$OUT/serve.log"; exit 1; }; sleep 1; done
grep -q '^serving:' "$OUT/serve.log" || { echo "the scorer did not start"; cat "$OUT/serve.log"; exit 1; }
"$BIN/cheems" eval data/sample/open.jsonl data/sample/human.jsonl --via-kafka --scorer-url "127.0.0.1:$port" \
    --db "$DB" --report "$OUT/report"
step "done: report in $OUT/report (results.json, per_category.png, README.md)"
