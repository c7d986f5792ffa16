#!/bin/bash
# One bounded recording. usage: run_shape.sh OUTDIR PORT SEED SHAPE.json SLOTS
# Starts: host CPU sampler, relay, llama-server, scraper, client; stops only the PIDs it started.
set -u
OUT=$1; PORT=$2; SEED=$3; SHAPE=$4; SLOTS=${5:-4}
S=$(cd "$(dirname "$0")" && pwd)
SCRATCH=${SCRATCH:-$(mktemp -d)}
LLAMA=${LLAMA:-/var/cache/tpsmon-ci/llama-server-3.21.1}
BIN=$LLAMA/bin/llama-server
MODEL=$LLAMA/tiny.gguf
PIDS=$SCRATCH/pids-$PORT; : > $PIDS
rm -rf $OUT; mkdir -p $OUT/metrics
FIFO=$SCRATCH/srv-$PORT.fifo; rm -f $FIFO; mkfifo $FIFO
SECS=$(python3 -c "import json,sys; s=json.load(open('$SHAPE')); print(int(sum(p['secs'] for p in s['phases'])+s.get('lead_idle',15)+240))")
date -u +"run start %FT%T.%NZ" | tee $OUT/run.log
python3 $S/hoststat.py $OUT/host-cpu.csv $PIDS $SECS & HSPID=$!
python3 $S/tsrelay.py $OUT/server-stderr-ts.log < $FIFO & echo "relay $!" >> $PIDS
$BIN -m $MODEL --host 127.0.0.1 --port $PORT --metrics -np $SLOTS -c $((SLOTS*1024)) --no-webui \
     --log-timestamps --log-file $OUT/server.log > $FIFO 2>&1 & SRVPID=$!; echo "server $SRVPID" >> $PIDS
for i in $(seq 1 60); do sleep 1; curl -s -m 2 127.0.0.1:$PORT/health | grep -q ok && break; done
echo "server healthy after ${i}s $(date -u +%FT%T.%NZ)" | tee -a $OUT/run.log
curl -s -m 3 127.0.0.1:$PORT/props > $OUT/props.json; curl -s -m 3 127.0.0.1:$PORT/v1/models > $OUT/models.json
python3 $S/scraper.py $OUT/metrics $PORT $SECS > $OUT/scraper.log 2>&1 & SCRPID=$!; echo "scraper $SCRPID" >> $PIDS
timeout $SECS python3 $S/client_shapes.py $OUT/client-records.json $PORT $SEED $SHAPE > $OUT/client.log 2>&1 & CLIPID=$!; echo "client $CLIPID" >> $PIDS
wait $CLIPID; echo "client rc $? $(date -u +%FT%T.%NZ)" | tee -a $OUT/run.log
sleep 3
kill -TERM $SCRPID 2>/dev/null
kill -TERM $SRVPID; for i in $(seq 1 20); do ps -p $SRVPID >/dev/null 2>&1 || break; sleep 0.5; done
RLY=$(awk '$1=="relay"{print $2}' $PIDS); for i in $(seq 1 10); do ps -p $RLY >/dev/null 2>&1 || break; sleep 0.5; done
ps -p $RLY >/dev/null 2>&1 && kill -TERM $RLY
sleep 1
while read n p; do ps -p $p >/dev/null 2>&1 && echo "STILL RUNNING $n $p" | tee -a $OUT/run.log; done < $PIDS
kill -TERM $HSPID 2>/dev/null
rm -f $FIFO
cp $SHAPE $OUT/shape.json
date -u +"run end %FT%T.%NZ" | tee -a $OUT/run.log
