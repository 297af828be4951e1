#!/bin/sh
# A fork bomb, held by the pids limit; the agent stops it at the script's timeout (it also ends
# by itself after 20 s, so nothing can hang on it).
if [ "$(cat /home/builder/source/attacks/mode)" != runtime ]; then
  echo 'RESULT {"forks": 0}'
  exit 0
fi
stop="$HOME/.stop-bomb"
rm -f "$stop"
(sleep 20; touch "$stop") &
bomb() { while [ ! -e "$stop" ]; do bomb & done; }
bomb 2>/dev/null &
sleep 30
echo 'RESULT {"forks": 1}'
