# Lease H, call 3 (and again as call 4 if head D is not done): wait for head D, bring back
# its log and the head.
O=/root/out/h3; mkdir -p $O
while [ ! -f /root/train/rcD ] && [ $SECONDS -lt 580 ]; do sleep 5; done
echo "head D rc $(cat /root/train/rcD 2>/dev/null)"
tr '\r' '\n' < /root/train/trainD.log | awk '/^training: /{n++; if (n%150==1) print; next} {print}' > $O/trainD.log
grep -E "^step|trained|time budget|rror" $O/trainD.log | tail -8
[ -f /root/train/rcD ] && cp -r /root/train/headD $O/
tar czf $OUT/h3.tgz -C /root/out h3
