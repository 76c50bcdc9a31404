package clients;

import static clients.Harness.*;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisClientConfig;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.JedisPoolConfig;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.JedisPubSub;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.Response;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.csc.Cache;
import redis.clients.jedis.csc.CacheConfig;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.params.SetParams;
import redis.clients.jedis.resps.ScanResult;
import redis.clients.jedis.resps.Tuple;
import redis.clients.jedis.util.SafeEncoder;

/** Jedis 5 as an ordinary application uses it, each step asserted. */
public final class JedisApp {
  static final String NAME = "jedis";
  static final String P = prefix(NAME);
  static final HostAndPort ADDR = new HostAndPort(HOST, PORT);

  /** Elsa's own transaction commands, sent through Jedis's raw-command API. */
  enum Elsa implements ProtocolCommand {
    BEGIN, PUT, COMMIT;
    public byte[] getRaw() { return SafeEncoder.encode(name()); }
  }

  static JedisClientConfig config(int db, RedisProtocol protocol) {
    return DefaultJedisClientConfig.builder().password(PASSWORD).clientName(NAME + "-app")
        .database(db).socketTimeoutMillis(15000).protocol(protocol).build();
  }

  static JedisPool newPool(int db) {
    JedisPoolConfig pc = new JedisPoolConfig();
    pc.setMaxTotal(64);
    pc.setTestOnBorrow(true); // a connection the server dropped is replaced, not handed out
    return new JedisPool(pc, ADDR, config(db, null));
  }

  public static void main(String[] args) throws Exception {
    JedisPool pool = newPool(0);

    feature("connect", () -> {
      try (Jedis j = pool.getResource()) {
        eq(j.ping(), "PONG", "PING");
        eq(j.clientGetname(), NAME + "-app", "CLIENT GETNAME");
      }
      try (Jedis bad = new Jedis(ADDR, DefaultJedisClientConfig.builder().password("wrong-password").build())) {
        bad.ping();
        throw new AssertionError("a wrong password was accepted");
      } catch (JedisDataException | JedisConnectionException expected) {
        // refused
      }
    });

    feature("pool", () -> {
      int n = 50, iters = 40;
      parallel(n, i -> {
        for (int j = 0; j < iters; j++) {
          try (Jedis c = pool.getResource()) {
            c.incr(P + "pool:shared");
            c.incr(P + "pool:own:" + i);
            c.set(P + "pool:val:" + i, i + "-" + j);
            eq(c.get(P + "pool:val:" + i), i + "-" + j, "own value");
          }
        }
      });
      try (Jedis j = pool.getResource()) {
        eq(j.get(P + "pool:shared"), String.valueOf(n * iters), "shared counter");
        for (int i = 0; i < n; i++) eq(j.get(P + "pool:own:" + i), String.valueOf(iters), "own counter");
      }
    });

    feature("pipeline", () -> {
      try (Jedis j = pool.getResource()) {
        Pipeline p = j.pipelined();
        List<Response<String>> sets = new ArrayList<>();
        for (int i = 0; i < 1000; i++) sets.add(p.set(P + "pipe:" + i, String.valueOf(i)));
        p.sync();
        for (Response<String> r : sets) eq(r.get(), "OK", "pipelined SET");
        Pipeline g = j.pipelined();
        List<Response<String>> gets = new ArrayList<>();
        for (int i = 0; i < 1000; i++) gets.add(g.get(P + "pipe:" + i));
        g.sync();
        for (int i = 0; i < 1000; i++) eq(gets.get(i).get(), String.valueOf(i), "pipelined GET");
        Transaction t = j.multi();
        for (int i = 0; i < 1000; i++) t.incr(P + "pipe:tx");
        List<Object> res = t.exec();
        eq(res.size(), 1000, "EXEC replies");
        eq(res.get(999), 1000L, "1000 INCRs in MULTI");
      }
    });

    feature("watch", () -> {
      String key = P + "watch:counter";
      try (Jedis j = pool.getResource()) { j.set(key, "0"); }
      int workers = 8, per = 15;
      AtomicInteger retries = new AtomicInteger();
      parallel(workers, w -> {
        for (int k = 0; k < per; k++) {
          try (Jedis c = pool.getResource()) {
            while (true) {
              c.watch(key);
              int v = Integer.parseInt(c.get(key));
              Transaction t = c.multi();
              t.set(key, String.valueOf(v + 1));
              List<Object> res = t.exec();
              if (res != null && !res.isEmpty()) break; // null: a watched key changed
              retries.incrementAndGet();
            }
          }
        }
      });
      try (Jedis j = pool.getResource()) {
        eq(j.get(key), String.valueOf(workers * per), "counter (" + retries.get() + " retries)");
      }
    });

    feature("begin", () -> {
      if (!TARGET.equals("elsa")) throw new Skip("BEGIN/COMMIT is Elsa's own (Redis has none)");
      String key = P + "begin:counter";
      try (Jedis j = pool.getResource()) { j.set(key, "0"); }
      int workers = 6, per = 10;
      AtomicInteger conflicts = new AtomicInteger();
      parallel(workers, w -> {
        try (Jedis c = pool.getResource()) { // BEGIN's state is per connection: hold it
          for (int k = 0; k < per; k++) {
            while (true) {
              eq(SafeEncoder.encode((byte[]) c.sendCommand(Elsa.BEGIN, "SI")), "OK", "BEGIN");
              int v = Integer.parseInt(SafeEncoder.encode((byte[]) c.sendCommand(redis.clients.jedis.Protocol.Command.GET, key)));
              eq(SafeEncoder.encode((byte[]) c.sendCommand(Elsa.PUT, key, String.valueOf(v + 1))), "OK", "PUT");
              try {
                Object ts = c.sendCommand(Elsa.COMMIT);
                check(ts instanceof Long l && l > 0, "COMMIT answered " + ts);
                break;
              } catch (JedisDataException e) {
                if (e.getMessage() == null || !e.getMessage().startsWith("CONFLICT")) throw e;
                conflicts.incrementAndGet();
              }
            }
          }
        }
      });
      try (Jedis j = pool.getResource()) {
        eq(j.get(key), String.valueOf(workers * per), "counter (" + conflicts.get() + " conflicts retried)");
      }
    });

    feature("strings", () -> {
      try (Jedis j = pool.getResource()) {
        eq(j.set(P + "s:a", "hello", SetParams.setParams().ex(100)), "OK", "SET EX");
        long ttl = j.ttl(P + "s:a");
        check(ttl > 0 && ttl <= 100, "TTL " + ttl);
        eq(j.setnx(P + "s:a", "x"), 0L, "SETNX on an existing key");
        eq(j.append(P + "s:a", " world"), 11L, "APPEND");
        eq(j.getrange(P + "s:a", 0, 4), "hello", "GETRANGE");
        // BITFIELD: small counters packed in one string, read back with BITFIELD_RO.
        eq(j.bitfield(P + "s:bf", "SET", "u8", "#1", "200", "OVERFLOW", "SAT", "INCRBY", "u8", "#1", "100",
            "OVERFLOW", "WRAP", "INCRBY", "i4", "0", "9"), java.util.Arrays.asList(0L, 255L, -7L), "BITFIELD");
        eq(j.bitfieldReadonly(P + "s:bf", "GET", "u8", "8", "GET", "i4", "0"), java.util.Arrays.asList(255L, -7L),
            "BITFIELD_RO");
        j.set(P + "s:ms", "v", SetParams.setParams().px(150));
        j.mset(P + "s:m1", "1", P + "s:m2", "2");
        eq(j.mget(P + "s:m1", P + "s:m2", P + "s:none"), java.util.Arrays.asList("1", "2", null), "MGET");
        eq(j.persist(P + "s:a"), 1L, "PERSIST");
        eq(j.ttl(P + "s:a"), -1L, "TTL after PERSIST");
        eq(j.getDel(P + "s:m1"), "1", "GETDEL");
        Thread.sleep(300);
        eq(j.get(P + "s:ms"), null, "expired PX key");
      }
    });

    feature("hashes", () -> {
      try (Jedis j = pool.getResource()) {
        String h = P + "h";
        eq(j.hset(h, Map.of("name", "ada", "lang", "java", "n", "1")), 3L, "HSET");
        eq(j.hget(h, "name"), "ada", "HGET");
        eq(j.hgetAll(h), Map.of("name", "ada", "lang", "java", "n", "1"), "HGETALL");
        eq(j.hdel(h, "lang"), 1L, "HDEL");
        eq(j.hlen(h), 2L, "HLEN");
        eq(j.hmget(h, "name", "nope"), java.util.Arrays.asList("ada", null), "HMGET");
      }
    });

    feature("sets", () -> {
      try (Jedis j = pool.getResource()) {
        String s = P + "set:s", t = P + "set:t";
        eq(j.sadd(s, "a", "b", "c"), 3L, "SADD");
        eq(j.sismember(s, "b"), true, "SISMEMBER");
        eq(j.smembers(s), Set.of("a", "b", "c"), "SMEMBERS");
        j.sadd(t, "b", "c", "d");
        eq(j.sinter(s, t), Set.of("b", "c"), "SINTER");
        eq(j.srem(s, "a"), 1L, "SREM");
        eq(j.scard(s), 2L, "SCARD");
      }
    });

    feature("zsets", () -> {
      try (Jedis j = pool.getResource()) {
        String z = P + "z";
        eq(j.zadd(z, Map.of("a", 1.0, "b", 2.0, "c", 3.0)), 3L, "ZADD");
        eq(j.zrangeWithScores(z, 0, -1), List.of(new Tuple("a", 1.0), new Tuple("b", 2.0), new Tuple("c", 3.0)), "ZRANGE WITHSCORES");
        eq(j.zincrby(z, 5, "a"), 6.0, "ZINCRBY");
        eq(j.zrank(z, "a"), 2L, "ZRANK");
        eq(j.zrangeByScore(z, 2, 3), List.of("b", "c"), "ZRANGEBYSCORE");
        eq(j.zrem(z, "b"), 1L, "ZREM");
        eq(j.zcard(z), 2L, "ZCARD");
      }
    });

    feature("lists", () -> {
      try (Jedis j = pool.getResource()) {
        String q = P + "list";
        eq(j.rpush(q, "a", "b", "c"), 3L, "RPUSH");
        eq(j.lpush(q, "z"), 4L, "LPUSH");
        eq(j.lrange(q, 0, -1), List.of("z", "a", "b", "c"), "LRANGE");
        eq(j.lpop(q), "z", "LPOP");
        eq(j.rpop(q), "c", "RPOP");
        eq(j.llen(q), 2L, "LLEN");
        String bq = P + "list:blocking";
        Thread pusher = new Thread(() -> {
          try (Jedis c = pool.getResource()) {
            Thread.sleep(300);
            c.rpush(bq, "job-1");
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
        });
        long t0 = System.nanoTime();
        pusher.start();
        eq(j.blpop(5, bq), List.of(bq, "job-1"), "BLPOP");
        pusher.join();
        check(System.nanoTime() - t0 < 4_000_000_000L, "BLPOP woke late");
        eq(j.blpop(0.2, bq), null, "BLPOP timeout on an empty list");
      }
    });

    feature("counters", () -> {
      try (Jedis j = pool.getResource()) {
        String c = P + "ctr";
        eq(j.incrBy(c, 10), 10L, "INCRBY");
        eq(j.decrBy(c, 3), 7L, "DECRBY");
        eq(j.incrByFloat(c, 0.5), 7.5, "INCRBYFLOAT");
        eq(j.hincrBy(P + "ctr:h", "f", 4), 4L, "HINCRBY");
        eq(j.hincrBy(P + "ctr:h", "f", -1), 3L, "HINCRBY");
      }
    });

    feature("scan", () -> {
      try (Jedis j = pool.getResource()) {
        Pipeline p = j.pipelined();
        for (int i = 0; i < 300; i++) p.set(P + "scan:" + i, String.valueOf(i));
        p.sync();
        Set<String> seen = new HashSet<>();
        ScanParams params = new ScanParams().match(P + "scan:*").count(50);
        String cursor = ScanParams.SCAN_POINTER_START;
        do {
          ScanResult<String> page = j.scan(cursor, params);
          seen.addAll(page.getResult());
          cursor = page.getCursor();
        } while (!cursor.equals(ScanParams.SCAN_POINTER_START));
        eq(seen.size(), 300, "keys SCAN found");
      }
    });

    feature("pubsub", () -> {
      String ch = P + "chan";
      List<String> got = new CopyOnWriteArrayList<>();
      CountDownLatch subscribed = new CountDownLatch(2);
      CountDownLatch received = new CountDownLatch(2);
      AtomicReference<Throwable> failure = new AtomicReference<>();
      JedisPubSub ps = new JedisPubSub() {
        @Override public void onMessage(String channel, String message) { got.add("message|" + channel + "|" + message); received.countDown(); }
        @Override public void onPMessage(String pattern, String channel, String message) { got.add("pmessage|" + channel + "|" + message); received.countDown(); }
        @Override public void onSubscribe(String channel, int n) { subscribed.countDown(); }
        @Override public void onPSubscribe(String pattern, int n) { subscribed.countDown(); }
      };
      Thread listener = new Thread(() -> {
        try (Jedis c = pool.getResource()) {
          c.subscribe(ps, ch); // blocks until every subscription is gone
        } catch (Throwable t) {
          failure.set(t);
          subscribed.countDown();
          subscribed.countDown();
        }
      });
      listener.start();
      while (!ps.isSubscribed() && failure.get() == null && listener.isAlive()) Thread.sleep(10);
      if (failure.get() != null) throw new RuntimeException(failure.get().getMessage(), failure.get());
      ps.psubscribe(P + "pat.*");
      check(subscribed.await(5, TimeUnit.SECONDS), "no subscribe confirmation");
      if (failure.get() != null) throw new RuntimeException(failure.get().getMessage(), failure.get());
      try (Jedis j = pool.getResource()) {
        eq(j.publish(ch, "hello"), 1L, "PUBLISH receivers");
        eq(j.publish(P + "pat.x", "world"), 1L, "PUBLISH receivers (pattern)");
        check(received.await(5, TimeUnit.SECONDS), "only " + got + " arrived");
        eq(got, List.of("message|" + ch + "|hello", "pmessage|" + P + "pat.x|world"), "messages");
        ps.unsubscribe();
        ps.punsubscribe();
        listener.join(5000);
        check(!listener.isAlive(), "subscribe did not return after UNSUBSCRIBE");
        eq(j.publish(ch, "nobody"), 0L, "PUBLISH after UNSUBSCRIBE");
      }
    });

    feature("lua", () -> {
      try (Jedis j = pool.getResource()) {
        String script = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
        eq(j.eval(script, List.of(P + "lua:n"), List.of("5")), 5L, "EVAL");
        String sha = j.scriptLoad(script);
        eq(j.evalsha(sha, List.of(P + "lua:n"), List.of("5")), 10L, "EVALSHA");
        eq(j.scriptExists(sha), true, "SCRIPT EXISTS");
      }
    });

    feature("select", () -> {
      try (JedisPool p1 = newPool(1); Jedis r1 = p1.getResource(); Jedis r0 = pool.getResource()) {
        String k = P + "db";
        r1.set(k, "in-db1");
        eq(r1.get(k), "in-db1", "GET in db 1");
        eq(r0.get(k), null, "db 0 sees db 1's key");
        r1.del(k);
      }
    });

    feature("cache", () -> {
      try (JedisPooled c = new JedisPooled(ADDR, config(0, RedisProtocol.RESP3), CacheConfig.builder().maxSize(1000).build());
           Jedis w = pool.getResource()) {
        String k = P + "cached";
        w.set(k, "v1");
        eq(c.get(k), "v1", "GET");
        eq(c.get(k), "v1", "GET again");
        Cache cache = c.getCache();
        check(cache.getSize() >= 1, "nothing was cached");
        w.set(k, "v2"); // the server's invalidation must evict the entry
        String v = null;
        for (int i = 0; i < 60 && !"v2".equals(v = c.get(k)); i++) Thread.sleep(50);
        eq(v, "v2", "value after invalidation");
      } catch (redis.clients.jedis.exceptions.JedisException e) {
        // Jedis refuses servers that report a version below 7.4 (Debian's redis-server is 7.0).
        if (String.valueOf(e.getMessage()).contains("'Redis 7.4' or later")) throw new Skip("Jedis: " + e.getMessage());
        throw e;
      }
    });

    feature("reconnect", () -> {
      if (RESTART_CMD.isEmpty()) throw new Skip("no RESTART_CMD");
      String k = P + "restart";
      try (Jedis j = pool.getResource()) { j.set(k, "before"); }
      restart();
      long deadline = System.nanoTime() + 20_000_000_000L;
      int errors = 0;
      String last = "";
      while (true) {
        try (Jedis j = pool.getResource()) {
          j.set(k + ":after", "after");
          break;
        } catch (JedisConnectionException e) {
          errors++;
          last = String.valueOf(e.getMessage());
          if (System.nanoTime() > deadline) throw e;
          Thread.sleep(200);
        }
      }
      System.out.println("INFO reconnect: " + errors + " errors reached the application before it worked again " + last);
      try (Jedis j = pool.getResource()) {
        eq(j.get(k + ":after"), "after", "GET after the restart");
        eq(j.clientGetname(), NAME + "-app", "client name after reconnect");
        if (TARGET.equals("elsa")) eq(j.get(k), "before", "a key written before the restart");
      }
      parallel(10, i -> { try (Jedis j = pool.getResource()) { j.incr(P + "restart:n"); } });
    });

    int rc = summary(NAME);
    pool.close();
    System.exit(rc);
  }
}
