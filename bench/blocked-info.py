"""Stress check for blocked-client accounting (session 32): replays Redis's Tcl test
"BLMPOP propagate as pop with count command to replica" against a running server and
counts the rounds where a BLMPOP that should have blocked had not run yet when INFO
already said a client was blocked. Run it under CPU load to widen races:

    (for i in 1 2 3; do timeout 60 sh -c 'while :; do :; done' & done) &
    python3 bench/blocked-info.py PORT 600

Prints "fails N"; 0 expected. Before the fix in conn.rs block_wait: 10 in 300.
"""
import redis, socket, time, sys
port = int(sys.argv[1])
r = redis.Redis(port=port)
def info_blocked():
    return r.info('clients')['blocked_clients']
def wait_blocked():
    for _ in range(50):
        if info_blocked() != 0: return
        time.sleep(0.1)
    raise Exception("no blocked")
def cmd(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x.encode() if isinstance(x, str) else x
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out
fails = 0
for it in range(int(sys.argv[2])):
    r.delete('mylist{t}', 'mylist2{t}', 'foo{t}')
    rd = socket.create_connection(('127.0.0.1', port))
    r.lpush('mylist{t}', 'a','b','c'); r.rpush('mylist2{t}', 1,2,3)
    r.execute_command('blmpop', 0, 1, 'mylist{t}', 'left', 'count', 1)
    r.execute_command('blmpop', 0, 2, 'mylist{t}', 'mylist2{t}', 'right', 'count', 10)
    r.execute_command('blmpop', 0, 2, 'mylist{t}', 'mylist2{t}', 'right', 'count', 10)
    rd.sendall(cmd('blmpop','0','1','mylist{t}','left','count','1'))
    wait_blocked()
    r.lpush('mylist{t}', 'a')
    rd.sendall(cmd('blmpop','0','2','mylist{t}','mylist2{t}','left','count','5'))
    wait_blocked()
    r.lpush('mylist{t}', 'a','b','c')
    rd.sendall(cmd('blmpop','0','2','mylist{t}','mylist2{t}','right','count','10'))
    wait_blocked()
    r.rpush('mylist2{t}', 'a','b','c')
    v = r.execute_command('blmpop', 0.01, 1, 'mylist{t}', 'left', 'count', 10)
    rd.close()
    if v is not None:
        fails += 1
        print("iteration", it, "got", v, "blocked now", info_blocked(), flush=True)
        time.sleep(0.5)
        print(" after 0.5s blocked", info_blocked(), r.execute_command('client','list'), flush=True)
print("fails", fails)
