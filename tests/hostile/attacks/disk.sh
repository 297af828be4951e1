#!/bin/sh
# A disk flood: 300 MB, more than sandbox.disk_gb. Enforced, it stops short.
if [ "$(cat /home/builder/source/attacks/mode)" != runtime ]; then
  echo 'RESULT {"disk_written": 0}'
  exit 0
fi
dd if=/dev/zero of="$HOME/flood" bs=1M count=300 2>/dev/null
size=$(stat -c %s "$HOME/flood" 2>/dev/null || echo 0)
rm -f "$HOME/flood"
echo "RESULT {\"disk_written\": $size}"
