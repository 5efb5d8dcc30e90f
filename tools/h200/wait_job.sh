# Wait up to $1 seconds for the background job (headE_job.sh, head_job.sh) to finish; print
# where it is; once it is done, copy its logs, head and bench results under $OUT/ba.
T=/root/train; end=$((SECONDS + ${1:-540}))
while [ ! -e $T/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
cat $T/status 2>/dev/null
for f in data train bench benchD; do
  [ -f $T/$f.log ] && tr '\r' '\n' < $T/$f.log | grep -v '^$' | grep -vE "^\s*$" | tail -3
done
O=$OUT/ba; mkdir -p $O
for f in data train bench benchD; do [ -f $T/$f.log ] && tr '\r' '\n' < $T/$f.log | grep -v '^$' | tail -60 > $O/$f.log; done
cp $T/status $O/ 2>/dev/null
for h in $T/head*; do [ -d $h ] && cp -r $h $O/; done
for d in bs1E bs1D bs1new bs1shipped; do [ -d $T/out/$d ] && cp -r $T/out/$d $O/ && rm -f $O/$d/*.png; done
[ -e $T/done ] && echo "job done" || echo "job still running"
