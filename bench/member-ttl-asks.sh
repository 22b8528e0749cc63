#!/usr/bin/env bash
# Member TTL writes on an active pair (issue 28, DECISIONS 326-327): sets,
# hashes and sorted sets whose members take TTLs (EXPIREMEMBER, HEXPIRE,
# HPERSIST...), and writes on keys with member TTLs (SADD, HSET, EXPIRE).
# For each phase, the key states the peer asked for (INFO `conflicts=`:
# before DECISIONS 326 every write on a key with a member TTL was a state
# round trip), the writer's rate, and the seconds until the peer has it all
# (DEBUG DIGESTs agree). Run by bench/ttl-asks.sh (its pair, load and
# variables: BIN, REQUESTS, KEYSPACE, SERVER_CPU, CLIENT_CPU, BASE), which
# sources this file for its phases.
if [[ -z ${PHASES_FROM:-} ]]; then
    PHASES_FROM="$(realpath "$0")" exec bash "$(dirname "$0")/ttl-asks.sh"
fi
phase 'SADD s m n (no member TTL yet)' SADD s:__rand_int__ m n
phase 'EXPIREMEMBER s m 100' EXPIREMEMBER s:__rand_int__ m 100
phase 'EXPIREMEMBER s m 200000 ms' EXPIREMEMBER s:__rand_int__ m 200000 ms
phase 'SADD s v (under member TTLs)' SADD s:__rand_int__ __rand_int__
phase 'EXPIRE s 1000 (the key TTL)' EXPIRE s:__rand_int__ 1000
phase 'PERSIST s m' PERSIST s:__rand_int__ m
phase 'HSET h f v g 1' HSET h:__rand_int__ f __rand_int__ g 1
phase 'HEXPIRE h 100 FIELDS 1 f' HEXPIRE h:__rand_int__ 100 FIELDS 1 f
phase 'HPEXPIRE h 200000 FIELDS 1 f' HPEXPIRE h:__rand_int__ 200000 FIELDS 1 f
phase 'HSET h g 7 (under member TTLs)' HSET h:__rand_int__ g 7
phase 'HINCRBY h g 1 (under member TTLs)' HINCRBY h:__rand_int__ g 1
phase 'HPERSIST h FIELDS 1 f' HPERSIST h:__rand_int__ FIELDS 1 f
phase 'ZADD z 1 a 2 b' ZADD z:__rand_int__ 1 a 2 b
phase 'PEXPIREMEMBERAT z a 4000000000000' PEXPIREMEMBERAT z:__rand_int__ a 4000000000000
phase 'ZINCRBY z 1 b (under member TTLs)' ZINCRBY z:__rand_int__ 1 b
