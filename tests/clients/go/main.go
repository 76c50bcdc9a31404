// go-redis v9 as an ordinary application uses it, each step asserted.
//
// Env: TARGET (elsa|redis), HOST, PORT, PASSWORD, RESTART_CMD. Prints one
// `PASS|FAIL|SKIP feature` line per feature and a summary; exits 1 on a FAIL.
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	target   = env("TARGET", "redis")
	addr     = env("HOST", "127.0.0.1") + ":" + env("PORT", "6379")
	password = os.Getenv("PASSWORD")
	name     = "go-redis"
	P        = fmt.Sprintf("go-redis:%08x:", rand.Uint32())
	rdb      *redis.Client
)

func env(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func newClient(db int, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Password: password, ClientName: name + "-app", DB: db,
		PoolSize: poolSize, ReadTimeout: 15 * time.Second,
	})
}

type skip string

// must panics on an error: the feature's runner turns it into a FAIL line.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

func eq(got, want any, what string) {
	if !reflect.DeepEqual(got, want) {
		panic(fmt.Errorf("%s: got %#v, want %#v", what, got, want))
	}
}

func check(cond bool, what string) {
	if !cond {
		panic(errors.New(what))
	}
}

func val[T any](v T, err error) T {
	must(err)
	return v
}

var results = map[string]int{}

func feature(fname string, f func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		f(ctx)
	}()
	var out any
	select {
	case out = <-done:
	case <-ctx.Done():
		out = errors.New("timed out after 60 s")
	}
	switch o := out.(type) {
	case nil:
		results["PASS"]++
		fmt.Printf("PASS %s\n", fname)
	case skip:
		results["SKIP"]++
		fmt.Printf("SKIP %s: %s\n", fname, string(o))
	default:
		results["FAIL"]++
		msg := strings.ReplaceAll(fmt.Sprint(o), "\n", " ")
		fmt.Printf("FAIL %s: %s\n", fname, msg)
	}
}

func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	errs := make(chan any, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() {
				if e := recover(); e != nil {
					errs <- e
				}
			}()
			f(i)
		}(i)
	}
	wg.Wait()
	close(errs)
	if e, ok := <-errs; ok {
		panic(e)
	}
}

func main() {
	rdb = newClient(0, 64)

	feature("connect", func(ctx context.Context) {
		eq(val(rdb.Ping(ctx).Result()), "PONG", "PING")
		eq(val(rdb.ClientGetName(ctx).Result()), name+"-app", "CLIENT GETNAME")
		bad := redis.NewClient(&redis.Options{Addr: addr, Password: "wrong-password", MaxRetries: -1})
		defer bad.Close()
		check(bad.Ping(ctx).Err() != nil, "a wrong password was accepted")
	})

	feature("pool", func(ctx context.Context) {
		n, iters := 50, 40
		parallel(n, func(i int) {
			for j := 0; j < iters; j++ {
				must(rdb.Incr(ctx, P+"pool:shared").Err())
				must(rdb.Incr(ctx, fmt.Sprintf("%spool:own:%d", P, i)).Err())
				v := fmt.Sprintf("%d-%d", i, j)
				must(rdb.Set(ctx, fmt.Sprintf("%spool:val:%d", P, i), v, 0).Err())
				eq(val(rdb.Get(ctx, fmt.Sprintf("%spool:val:%d", P, i)).Result()), v, "own value")
			}
		})
		eq(val(rdb.Get(ctx, P+"pool:shared").Int()), n*iters, "shared counter")
		for i := 0; i < n; i++ {
			eq(val(rdb.Get(ctx, fmt.Sprintf("%spool:own:%d", P, i)).Int()), iters, "own counter")
		}
	})

	feature("pipeline", func(ctx context.Context) {
		cmds := val(rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 1000; i++ {
				p.Set(ctx, fmt.Sprintf("%spipe:%d", P, i), i, 0)
			}
			return nil
		}))
		eq(len(cmds), 1000, "replies")
		gets := make([]*redis.StringCmd, 1000)
		_ = val(rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range gets {
				gets[i] = p.Get(ctx, fmt.Sprintf("%spipe:%d", P, i))
			}
			return nil
		}))
		for i, g := range gets {
			eq(val(g.Result()), fmt.Sprint(i), "pipelined GET")
		}
		var last *redis.IntCmd
		_ = val(rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 1000; i++ {
				last = p.Incr(ctx, P+"pipe:tx")
			}
			return nil
		}))
		eq(val(last.Result()), int64(1000), "1000 INCRs in MULTI")
	})

	feature("watch", func(ctx context.Context) {
		key := P + "watch:counter"
		must(rdb.Set(ctx, key, 0, 0).Err())
		workers, per := 8, 15
		var retries atomic.Int64
		parallel(workers, func(int) {
			for k := 0; k < per; k++ {
				for {
					err := rdb.Watch(ctx, func(tx *redis.Tx) error {
						v, err := tx.Get(ctx, key).Int()
						if err != nil {
							return err
						}
						_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, key, v+1, 0)
							return nil
						})
						return err
					}, key)
					if err == redis.TxFailedErr {
						retries.Add(1)
						continue
					}
					must(err)
					break
				}
			}
		})
		eq(val(rdb.Get(ctx, key).Int()), workers*per, fmt.Sprintf("counter (%d retries)", retries.Load()))
	})

	feature("begin", func(ctx context.Context) {
		if target != "elsa" {
			panic(skip("BEGIN/COMMIT is Elsa's own (Redis has none)"))
		}
		key := P + "begin:counter"
		must(rdb.Set(ctx, key, 0, 0).Err())
		workers, per := 6, 10
		var conflicts atomic.Int64
		parallel(workers, func(int) {
			conn := rdb.Conn() // BEGIN's state is per connection
			defer conn.Close()
			for k := 0; k < per; k++ {
				for {
					eq(val(conn.Do(ctx, "BEGIN", "SI").Text()), "OK", "BEGIN")
					v := val(conn.Do(ctx, "GET", key).Int())
					eq(val(conn.Do(ctx, "PUT", key, v+1).Text()), "OK", "PUT")
					ts, err := conn.Do(ctx, "COMMIT").Int64()
					if err != nil && strings.HasPrefix(err.Error(), "CONFLICT") {
						conflicts.Add(1)
						continue
					}
					must(err)
					check(ts > 0, "COMMIT timestamp")
					break
				}
			}
		})
		eq(val(rdb.Get(ctx, key).Int()), workers*per, fmt.Sprintf("counter (%d conflicts retried)", conflicts.Load()))
	})

	feature("strings", func(ctx context.Context) {
		eq(val(rdb.Set(ctx, P+"s:a", "hello", 100*time.Second).Result()), "OK", "SET EX")
		ttl := val(rdb.TTL(ctx, P+"s:a").Result())
		check(ttl > 0 && ttl <= 100*time.Second, "TTL")
		eq(val(rdb.SetNX(ctx, P+"s:a", "x", 0).Result()), false, "SETNX on an existing key")
		eq(val(rdb.Append(ctx, P+"s:a", " world").Result()), int64(11), "APPEND")
		eq(val(rdb.GetRange(ctx, P+"s:a", 0, 4).Result()), "hello", "GETRANGE")
		// BITFIELD: small counters packed in one string, read back with BITFIELD_RO.
		eq(val(rdb.BitField(ctx, P+"s:bf", "SET", "u8", "#1", 200, "OVERFLOW", "SAT", "INCRBY", "u8", "#1", 100,
			"OVERFLOW", "WRAP", "INCRBY", "i4", 0, 9).Result()), []int64{0, 255, -7}, "BITFIELD")
		eq(val(rdb.BitFieldRO(ctx, P+"s:bf", "u8", 8, "i4", 0).Result()), []int64{255, -7}, "BITFIELD_RO")
		must(rdb.Set(ctx, P+"s:ms", "v", 150*time.Millisecond).Err())
		must(rdb.MSet(ctx, P+"s:m1", "1", P+"s:m2", "2").Err())
		eq(val(rdb.MGet(ctx, P+"s:m1", P+"s:m2", P+"s:none").Result()), []any{"1", "2", nil}, "MGET")
		eq(val(rdb.Persist(ctx, P+"s:a").Result()), true, "PERSIST")
		eq(val(rdb.TTL(ctx, P+"s:a").Result()), time.Duration(-1), "TTL after PERSIST")
		eq(val(rdb.GetDel(ctx, P+"s:m1").Result()), "1", "GETDEL")
		time.Sleep(300 * time.Millisecond)
		eq(rdb.Get(ctx, P+"s:ms").Err(), redis.Nil, "expired PX key")
	})

	feature("hashes", func(ctx context.Context) {
		h := P + "h"
		eq(val(rdb.HSet(ctx, h, map[string]any{"name": "ada", "lang": "go", "n": "1"}).Result()), int64(3), "HSET")
		eq(val(rdb.HGet(ctx, h, "name").Result()), "ada", "HGET")
		eq(val(rdb.HGetAll(ctx, h).Result()), map[string]string{"name": "ada", "lang": "go", "n": "1"}, "HGETALL")
		eq(val(rdb.HDel(ctx, h, "lang").Result()), int64(1), "HDEL")
		eq(val(rdb.HLen(ctx, h).Result()), int64(2), "HLEN")
		eq(val(rdb.HMGet(ctx, h, "name", "nope").Result()), []any{"ada", nil}, "HMGET")
		type user struct {
			Name string `redis:"name"`
			N    int    `redis:"n"`
		}
		var u user
		must(rdb.HGetAll(ctx, h).Scan(&u))
		eq(u, user{"ada", 1}, "HGETALL into a struct")
	})

	feature("sets", func(ctx context.Context) {
		s, t := P+"set:s", P+"set:t"
		eq(val(rdb.SAdd(ctx, s, "a", "b", "c").Result()), int64(3), "SADD")
		eq(val(rdb.SIsMember(ctx, s, "b").Result()), true, "SISMEMBER")
		eq(len(val(rdb.SMembersMap(ctx, s).Result())), 3, "SMEMBERS")
		must(rdb.SAdd(ctx, t, "b", "c", "d").Err())
		eq(len(val(rdb.SInter(ctx, s, t).Result())), 2, "SINTER")
		eq(val(rdb.SRem(ctx, s, "a").Result()), int64(1), "SREM")
		eq(val(rdb.SCard(ctx, s).Result()), int64(2), "SCARD")
	})

	feature("zsets", func(ctx context.Context) {
		z := P + "z"
		eq(val(rdb.ZAdd(ctx, z, redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2, Member: "b"}, redis.Z{Score: 3, Member: "c"}).Result()), int64(3), "ZADD")
		eq(val(rdb.ZRangeWithScores(ctx, z, 0, -1).Result()), []redis.Z{{Score: 1, Member: "a"}, {Score: 2, Member: "b"}, {Score: 3, Member: "c"}}, "ZRANGE WITHSCORES")
		eq(val(rdb.ZIncrBy(ctx, z, 5, "a").Result()), 6.0, "ZINCRBY")
		eq(val(rdb.ZRank(ctx, z, "a").Result()), int64(2), "ZRANK")
		eq(val(rdb.ZRangeByScore(ctx, z, &redis.ZRangeBy{Min: "2", Max: "3"}).Result()), []string{"b", "c"}, "ZRANGEBYSCORE")
		eq(val(rdb.ZRem(ctx, z, "b").Result()), int64(1), "ZREM")
		eq(val(rdb.ZCard(ctx, z).Result()), int64(2), "ZCARD")
	})

	feature("lists", func(ctx context.Context) {
		q := P + "list"
		eq(val(rdb.RPush(ctx, q, "a", "b", "c").Result()), int64(3), "RPUSH")
		eq(val(rdb.LPush(ctx, q, "z").Result()), int64(4), "LPUSH")
		eq(val(rdb.LRange(ctx, q, 0, -1).Result()), []string{"z", "a", "b", "c"}, "LRANGE")
		eq(val(rdb.LPop(ctx, q).Result()), "z", "LPOP")
		eq(val(rdb.RPop(ctx, q).Result()), "c", "RPOP")
		eq(val(rdb.LLen(ctx, q).Result()), int64(2), "LLEN")
		bq := P + "list:blocking"
		go func() {
			time.Sleep(300 * time.Millisecond)
			rdb.RPush(ctx, bq, "job-1")
		}()
		t0 := time.Now()
		eq(val(rdb.BLPop(ctx, 5*time.Second, bq).Result()), []string{bq, "job-1"}, "BLPOP")
		check(time.Since(t0) < 4*time.Second, "BLPOP woke late")
		eq(rdb.BLPop(ctx, 200*time.Millisecond, bq).Err(), redis.Nil, "BLPOP timeout on an empty list")
	})

	feature("counters", func(ctx context.Context) {
		c := P + "ctr"
		eq(val(rdb.IncrBy(ctx, c, 10).Result()), int64(10), "INCRBY")
		eq(val(rdb.DecrBy(ctx, c, 3).Result()), int64(7), "DECRBY")
		eq(val(rdb.IncrByFloat(ctx, c, 0.5).Result()), 7.5, "INCRBYFLOAT")
		eq(val(rdb.HIncrBy(ctx, P+"ctr:h", "f", 4).Result()), int64(4), "HINCRBY")
		eq(val(rdb.HIncrBy(ctx, P+"ctr:h", "f", -1).Result()), int64(3), "HINCRBY")
	})

	feature("scan", func(ctx context.Context) {
		_ = val(rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 300; i++ {
				p.Set(ctx, fmt.Sprintf("%sscan:%d", P, i), i, 0)
			}
			return nil
		}))
		seen := map[string]bool{}
		it := rdb.Scan(ctx, 0, P+"scan:*", 50).Iterator()
		for it.Next(ctx) {
			seen[it.Val()] = true
		}
		must(it.Err())
		eq(len(seen), 300, "keys SCAN found")
	})

	feature("pubsub", func(ctx context.Context) {
		ch := P + "chan"
		ps := rdb.Subscribe(ctx, ch)
		defer ps.Close()
		_ = val(ps.Receive(ctx)) // the subscribe confirmation
		must(ps.PSubscribe(ctx, P+"pat.*"))
		_ = val(ps.Receive(ctx))
		eq(val(rdb.Publish(ctx, ch, "hello").Result()), int64(1), "PUBLISH receivers")
		eq(val(rdb.Publish(ctx, P+"pat.x", "world").Result()), int64(1), "PUBLISH receivers (pattern)")
		msgs := ps.Channel()
		var got []string
		for len(got) < 2 {
			select {
			case m := <-msgs:
				got = append(got, m.Pattern+"|"+m.Channel+"|"+m.Payload)
			case <-time.After(3 * time.Second):
				panic(fmt.Errorf("only %v arrived", got))
			}
		}
		eq(got, []string{"|" + ch + "|hello", P + "pat.*|" + P + "pat.x|world"}, "messages")
		// go-redis sends UNSUBSCRIBE without waiting for its confirmation:
		// give the server up to 3 s to count the subscriber gone.
		must(ps.Unsubscribe(ctx, ch))
		must(ps.PUnsubscribe(ctx))
		receivers := int64(-1)
		for deadline := time.Now().Add(3 * time.Second); receivers != 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			receivers = val(rdb.Publish(ctx, ch, "nobody").Result())
		}
		eq(receivers, int64(0), "PUBLISH after UNSUBSCRIBE")
	})

	feature("lua", func(ctx context.Context) {
		incrBy := redis.NewScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
		eq(val(incrBy.Run(ctx, rdb, []string{P + "lua:n"}, 5).Int()), 5, "Script.Run (EVALSHA, then EVAL)")
		eq(val(incrBy.Run(ctx, rdb, []string{P + "lua:n"}, 5).Int()), 10, "Script.Run again (EVALSHA)")
		eq(val(rdb.Eval(ctx, "return {KEYS[1], ARGV[1]}", []string{"k"}, "v").StringSlice()), []string{"k", "v"}, "EVAL")
	})

	feature("select", func(ctx context.Context) {
		r1 := newClient(1, 4)
		defer r1.Close()
		k := P + "db"
		must(r1.Set(ctx, k, "in-db1", 0).Err())
		eq(val(r1.Get(ctx, k).Result()), "in-db1", "GET in db 1")
		eq(rdb.Get(ctx, k).Err(), redis.Nil, "db 0 sees db 1's key")
		must(r1.Del(ctx, k).Err())
	})

	feature("cache", func(ctx context.Context) {
		panic(skip("go-redis v9.17 has no client-side cache"))
	})

	feature("reconnect", func(ctx context.Context) {
		cmd := os.Getenv("RESTART_CMD")
		if cmd == "" {
			panic(skip("no RESTART_CMD"))
		}
		k := P + "restart"
		must(rdb.Set(ctx, k, "before", 0).Err())
		out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
		if err != nil {
			panic(fmt.Errorf("restart: %v: %s", err, out))
		}
		deadline, errs, last := time.Now().Add(20*time.Second), 0, ""
		for {
			err := rdb.Set(ctx, k+":after", "after", 0).Err()
			if err == nil {
				break
			}
			errs, last = errs+1, err.Error()
			if time.Now().After(deadline) {
				panic(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		fmt.Printf("INFO reconnect: %d errors reached the application before it worked again %s\n", errs, last)
		eq(val(rdb.Get(ctx, k+":after").Result()), "after", "GET after the restart")
		eq(val(rdb.ClientGetName(ctx).Result()), name+"-app", "client name after reconnect")
		if target == "elsa" {
			eq(val(rdb.Get(ctx, k).Result()), "before", "a key written before the restart")
		}
		parallel(10, func(int) { must(rdb.Incr(ctx, P+"restart:n").Err()) })
	})

	fmt.Printf("SUMMARY %s %s: %d passed, %d failed, %d skipped\n", name, target, results["PASS"], results["FAIL"], results["SKIP"])
	if results["FAIL"] > 0 {
		os.Exit(1)
	}
}
