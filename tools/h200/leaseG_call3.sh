# Lease G, call 3: wait for heads A and B, then bring back their logs and the heads.
O=/root/out/g3; mkdir -p $O
while { [ ! -f /root/train/rcA ] || [ ! -f /root/train/rcB ]; } && [ $SECONDS -lt 575 ]; do sleep 5; done
for h in A B; do
  echo "head $h rc $(cat /root/train/rc$h 2>/dev/null)"
  tr '\r' '\n' < /root/train/train$h.log > $O/train$h.log
  grep -E "^step|trained|time budget|rror" $O/train$h.log | tail -8
  [ -d /root/train/head$h ] && cp -r /root/train/head$h $O/
done
tr '\r' '\n' < /root/train/data.log | grep -v "^$" | tail -30 > $O/data_log_tail.txt
tar czf $OUT/g3.tgz -C /root/out g3
