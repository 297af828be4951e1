#!/bin/sh
# As builder, in the source folder: 500 MB of zeros when `mode` says fill, then more output
# after the disk is full (the agent must still get the step's failure through).
[ "$(cat mode)" = fill ] || exit 0
dd if=/dev/zero of=big bs=1M count=500
status=$?
head -c 300000 /dev/zero | tr '\0' z
echo
exit $status
