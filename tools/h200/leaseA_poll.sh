# Lease A, later calls: wait a while, show progress; once done, bring the head and logs back.
sleep ${WAIT:-240}
tail -c 800 /root/train/data.log; echo; tail -c 1500 /root/train/train.log 2>/dev/null; echo
if [ -f /root/train/rc ]; then
  mkdir -p $OUT/head $OUT/logs
  cp /root/train/eagle1-smollm2-135m-instruct/{config.json,model.safetensors} $OUT/head/
  cp /root/train/data.log /root/train/train.log $OUT/logs/
  echo "rc $(cat /root/train/rc)"; ls -la $OUT/head
fi
