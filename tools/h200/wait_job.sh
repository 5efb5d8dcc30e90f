# Wait up to $1 seconds for the background job (headE_job.sh, head_job.sh) to finish; print
# where it is; copy its logs (and, once it is done, its bench results) to $OUT/ba/job.tar and
# its head's files to $OUT/ba/ (a call returns at most 8 files).
T=/root/train; end=$((SECONDS + ${1:-540}))
while [ ! -e $T/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
cat $T/status 2>/dev/null
for f in data data1 train bench benchD; do
  [ -f $T/$f.log ] && tr '\r' '\n' < $T/$f.log | grep -v '^$' | grep -vE "^\s*$" | tail -3
done
grep -h "took\|^data:" $T/data*.log 2>/dev/null; tail -3 $T/host.txt 2>/dev/null
O=$OUT/ba; W=/tmp/waitjob; rm -rf $W && mkdir -p $O $W
for f in data data1 train bench benchD; do [ -f $T/$f.log ] && tr '\r' '\n' < $T/$f.log | grep -v '^$' | tail -60 > $W/$f.log; done
cp $T/status $W/ 2>/dev/null; cp $T/host.txt $W/ 2>/dev/null; cp $T/tests.txt $W/ 2>/dev/null
for d in bs1E bs1D bs1new bs1shipped; do
  [ -f $T/out/$d/results.json ] && mkdir -p $W/$d && cp $T/out/$d/results.json $W/$d/
done
tar -C $W -cf $O/job.tar .
for h in $T/head*; do [ -d $h ] && cp $h/config.json $h/model.safetensors $h/draft_vocab.json $O/ 2>/dev/null; done
[ -e $T/done ] && echo "job done" || echo "job still running"
