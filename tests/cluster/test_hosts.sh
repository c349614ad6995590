#!/usr/bin/env bash
# The two-host fixture itself (tests/cluster/hosts.sh):
#   - each host has its own hostname, loopback and one veth end with its own address, and
#     reaches the other by name; the machine's own namespace cannot reach them, and its
#     links, addresses, routes and /etc/hosts are the same before and after;
#   - teardown removes the namespaces (their holders), the veth pair, every process started
#     on a host and the state directory;
#   - a test shell killed with SIGKILL (no trap runs) is cleaned up by the fixture's janitor.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
source "$ROOT/tests/cluster/hosts.sh"
th_require
t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
fail() { echo "FAIL: $*"; exit 1; }
machine_state() { ip -o link | sed 's/^[0-9]*: //' | awk '{print $1, $2}' | sort; ip -o addr | awk '{print $2, $4}' | sort; ip route; md5sum /etc/hosts; hostname; }
before=$(machine_state)
trap 'th_down' EXIT

th_up || fail "th_up"
h1=${TH_HOSTS[0]} h2=${TH_HOSTS[1]}
[ "$(th_exec "$h1" hostname)" = "$h1" ] && [ "$(th_exec "$h2" hostname)" = "$h2" ] || fail "hostnames"
[ "$(hostname)" != "$h1" ] || fail "the machine's hostname changed"
for i in 0 1; do
    links=$(th_exec "${TH_HOSTS[$i]}" ip -o link | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')
    [ "$links" = "lo ${TH_VETH[$i]} " ] || fail "${TH_HOSTS[$i]} has links '$links', want 'lo ${TH_VETH[$i]}'"
    th_exec "${TH_HOSTS[$i]}" ip -o addr | grep -q "inet ${TH_IPS[$i]}/24" || fail "${TH_HOSTS[$i]} lacks ${TH_IPS[$i]}"
done
th_exec "$h1" getent hosts "$h2" | grep -q "^${TH_IPS[1]} " || fail "$h1 does not resolve $h2"
th_exec "$h2" bash -c "exec 3<>/dev/tcp/$h1/9" 2>&1 | grep -q refused || fail "$h2 cannot reach $h1 by name"
# From the machine itself: no route to the hosts' subnet.
out=$(timeout 5 bash -c "exec 3<>/dev/tcp/${TH_IPS[0]}/9" 2>&1)
echo "$out" | grep -q -i "refused" && fail "the machine's own namespace reaches ${TH_IPS[0]}: the hosts are not isolated"
# Shared file system, node-local TH_DIR/local.
th_exec "$h2" sh -c "echo from-h2 > '$TH_DIR/shared-probe' && echo h2-local > '$TH_DIR/local/probe'"
[ "$(th_exec "$h1" cat "$TH_DIR/shared-probe")" = from-h2 ] || fail "the hosts do not share the file system"
th_exec "$h1" test -e "$TH_DIR/local/probe" && fail "TH_DIR/local is not node-local"
[ "$(cat "$TH_DIR/$h2/local/probe")" = h2-local ] || fail "TH_DIR/local of $h2 is not TH_DIR/$h2/local"
# Processes started on a host are found and ended by teardown, even stopped ones.
th_bg "$h2" "$TH_DIR/sleeper.log" sleep 1000
sleeper=$!
sleep 0.2
kill -STOP "$sleeper" 2>/dev/null
th_pids "$h2" | grep -q . || fail "th_pids found nothing on $h2"
th_down
th_check_clean || fail "teardown left things behind"
kill -0 "$sleeper" 2>/dev/null && fail "a process started on $h2 survived teardown"
echo "ok ($(elapsed) s): hostnames, links, addresses, name resolution, isolation, shared and node-local storage; teardown clean"

# A test shell killed by SIGKILL: its trap never runs, the janitor cleans up.
( th_up > /dev/null 2>&1 || exit 1
  echo "$TH_DIR ${TH_VETH[*]} $(cat "$TH_DIR"/pid/*)" > "/tmp/mrcnn-hosts-owner.$$"
  th_bg "${TH_HOSTS[1]}" /dev/null sleep 1000
  sleep 1000 ) &
owner=$!
for _ in $(seq 100); do [ -s "/tmp/mrcnn-hosts-owner.$$" ] && break; sleep 0.1; done
read -r dir va vb p1 p2 < "/tmp/mrcnn-hosts-owner.$$"
rm -f "/tmp/mrcnn-hosts-owner.$$"
[ -d "$dir" ] || fail "the owner shell did not bring the hosts up"
tk=$(date +%s.%N)
kill -KILL "$owner"
wait "$owner" 2>/dev/null
for _ in $(seq 100); do
    [ ! -e "$dir" ] && ! kill -0 "$p1" 2>/dev/null && ! kill -0 "$p2" 2>/dev/null && break
    sleep 0.1
done
[ -e "$dir" ] && fail "the janitor did not remove $dir within 10 s of the owner's SIGKILL"
kill -0 "$p1" 2>/dev/null || kill -0 "$p2" 2>/dev/null && fail "the janitor left a namespace holder running"
ip link show "$va" > /dev/null 2>&1 && fail "the janitor left veth $va"
echo "ok ($(elapsed) s): owner killed with SIGKILL: the janitor tore everything down in $(awk -v a="$tk" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

after=$(machine_state)
[ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after"); fail "the machine's own network or /etc/hosts changed"; }
echo "PASS: the two-host fixture in $(elapsed) s (the machine's links, addresses, routes and /etc/hosts unchanged)"
