#!/bin/sh
# As the benchmark user: which attacks worked (1) or not (0), as metrics; and the socket folder
# attacked again, now that root may have handed it to us.
token_stolen=0; root_write=0; socket_tampered=0; setuid_planted=0
[ -e "$HOME/.stolen" ] && token_stolen=1
[ -e /etc/hostile/settings.json ] && root_write=1
[ -e /run/sandbench/planted.txt ] || [ -e /run/sandbench/planted-sums ] && root_write=1
# A clean revision only looks.
attack=yes
[ "$(cat /home/builder/source/attacks/mode)" = none ] && attack=no
if [ $attack = yes ] && touch /run/sandbench/.probe 2>/dev/null; then
  rm -f /run/sandbench/.probe
  if cp /bin/sh /run/sandbench/sh 2>/dev/null && chmod 4755 /run/sandbench/sh 2>/dev/null; then
    setuid_planted=1
  fi
  if rm -f /run/sandbench/agent.sock 2>/dev/null && [ ! -e /run/sandbench/agent.sock ]; then
    socket_tampered=1
    # Listen where the controller did, to catch the next agent that connects (and its token).
    timeout 3 node -e "require('net').createServer(c => c.on('data', d => console.log('caught ' + d.length + ' bytes'))).listen('/run/sandbench/agent.sock')" 2>/dev/null
  fi
fi
echo "RESULT {\"token_stolen\": $token_stolen, \"root_write\": $root_write, \"socket_tampered\": $socket_tampered, \"setuid_planted\": $setuid_planted}"
