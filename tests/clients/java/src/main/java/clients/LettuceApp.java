package clients;

import static clients.Harness.*;

import io.lettuce.core.BitFieldArgs;
import io.lettuce.core.KeyValue;
import io.lettuce.core.LettuceFutures;
import io.lettuce.core.Range;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.RedisURI;
import io.lettuce.core.ScanArgs;
import io.lettuce.core.ScanIterator;
import io.lettuce.core.ScoredValue;
import io.lettuce.core.ScriptOutputType;
import io.lettuce.core.SetArgs;
import io.lettuce.core.TrackingArgs;
import io.lettuce.core.TransactionResult;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.RedisAsyncCommands;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.IntegerOutput;
import io.lettuce.core.output.StatusOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import io.lettuce.core.pubsub.RedisPubSubAdapter;
import io.lettuce.core.pubsub.StatefulRedisPubSubConnection;
import io.lettuce.core.support.caching.CacheAccessor;
import io.lettuce.core.support.caching.CacheFrontend;
import io.lettuce.core.support.caching.ClientSideCaching;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/** Lettuce 6 as an ordinary application uses it, each step asserted. */
public final class LettuceApp {
  static final String NAME = "lettuce";
  static final String P = prefix(NAME);
  static final StringCodec CODEC = StringCodec.UTF8;

  /** Elsa's own transaction commands, sent with dispatch(). */
  enum Elsa implements ProtocolKeyword {
    BEGIN, PUT, COMMIT;
    public byte[] getBytes() { return name().getBytes(StandardCharsets.US_ASCII); }
  }

  static RedisClient newClient(int db, String password) {
    RedisURI uri = RedisURI.builder().withHost(HOST).withPort(PORT).withPassword(password.toCharArray())
        .withClientName(NAME + "-app").withDatabase(db).withTimeout(Duration.ofSeconds(15)).build();
    return RedisClient.create(uri);
  }

  static List<String> values(List<KeyValue<String, String>> kvs) {
    List<String> out = new ArrayList<>();
    for (KeyValue<String, String> kv : kvs) out.add(kv.getValueOrElse(null));
    return out;
  }

  public static void main(String[] args) throws Exception {
    RedisClient client = newClient(0, PASSWORD);
    StatefulRedisConnection<String, String> conn = client.connect();
    RedisCommands<String, String> r = conn.sync(); // thread-safe: shared by every worker

    feature("connect", () -> {
      eq(r.ping(), "PONG", "PING");
      eq(r.clientGetname(), NAME + "-app", "CLIENT GETNAME");
      RedisClient bad = newClient(0, "wrong-password");
      try {
        bad.connect().close();
        throw new AssertionError("a wrong password was accepted");
      } catch (RedisException expected) {
        // refused
      } finally {
        bad.shutdown(Duration.ZERO, Duration.ZERO);
      }
    });

    feature("pool", () -> {
      int n = 50, iters = 40;
      parallel(n, i -> {
        for (int j = 0; j < iters; j++) {
          r.incr(P + "pool:shared");
          r.incr(P + "pool:own:" + i);
          r.set(P + "pool:val:" + i, i + "-" + j);
          eq(r.get(P + "pool:val:" + i), i + "-" + j, "own value");
        }
      });
      eq(r.get(P + "pool:shared"), String.valueOf(n * iters), "shared counter");
      for (int i = 0; i < n; i++) eq(r.get(P + "pool:own:" + i), String.valueOf(iters), "own counter");
    });

    feature("pipeline", () -> {
      try (StatefulRedisConnection<String, String> c = client.connect()) {
        c.setAutoFlushCommands(false);
        RedisAsyncCommands<String, String> a = c.async();
        List<RedisFuture<String>> sets = new ArrayList<>();
        for (int i = 0; i < 1000; i++) sets.add(a.set(P + "pipe:" + i, String.valueOf(i)));
        c.flushCommands();
        check(LettuceFutures.awaitAll(Duration.ofSeconds(10), sets.toArray(new RedisFuture[0])), "SETs timed out");
        for (RedisFuture<String> f : sets) eq(f.get(), "OK", "pipelined SET");
        List<RedisFuture<String>> gets = new ArrayList<>();
        for (int i = 0; i < 1000; i++) gets.add(a.get(P + "pipe:" + i));
        c.flushCommands();
        check(LettuceFutures.awaitAll(Duration.ofSeconds(10), gets.toArray(new RedisFuture[0])), "GETs timed out");
        for (int i = 0; i < 1000; i++) eq(gets.get(i).get(), String.valueOf(i), "pipelined GET");
        c.setAutoFlushCommands(true);
        RedisCommands<String, String> s = c.sync();
        eq(s.multi(), "OK", "MULTI");
        for (int i = 0; i < 1000; i++) s.incr(P + "pipe:tx");
        TransactionResult res = s.exec();
        eq(res.size(), 1000, "EXEC replies");
        eq(res.get(999), 1000L, "1000 INCRs in MULTI");
      }
    });

    feature("watch", () -> {
      String key = P + "watch:counter";
      r.set(key, "0");
      int workers = 8, per = 15;
      AtomicInteger retries = new AtomicInteger();
      parallel(workers, w -> {
        try (StatefulRedisConnection<String, String> c = client.connect()) { // WATCH holds its connection
          RedisCommands<String, String> s = c.sync();
          for (int k = 0; k < per; k++) {
            while (true) {
              s.watch(key);
              int v = Integer.parseInt(s.get(key));
              s.multi();
              s.set(key, String.valueOf(v + 1));
              if (!s.exec().wasDiscarded()) break;
              retries.incrementAndGet();
            }
          }
        }
      });
      eq(r.get(key), String.valueOf(workers * per), "counter (" + retries.get() + " retries)");
    });

    feature("begin", () -> {
      if (!TARGET.equals("elsa")) throw new Skip("BEGIN/COMMIT is Elsa's own (Redis has none)");
      String key = P + "begin:counter";
      r.set(key, "0");
      int workers = 6, per = 10;
      AtomicInteger conflicts = new AtomicInteger();
      parallel(workers, w -> {
        try (StatefulRedisConnection<String, String> c = client.connect()) { // BEGIN's state is per connection
          RedisCommands<String, String> s = c.sync();
          for (int k = 0; k < per; k++) {
            while (true) {
              eq(s.dispatch(Elsa.BEGIN, new StatusOutput<>(CODEC), new CommandArgs<>(CODEC).add("SI")), "OK", "BEGIN");
              int v = Integer.parseInt(s.get(key));
              eq(s.dispatch(Elsa.PUT, new StatusOutput<>(CODEC), new CommandArgs<>(CODEC).addKey(key).addValue(String.valueOf(v + 1))), "OK", "PUT");
              try {
                Long ts = s.dispatch(Elsa.COMMIT, new IntegerOutput<>(CODEC));
                check(ts != null && ts > 0, "COMMIT answered " + ts);
                break;
              } catch (RedisCommandExecutionException e) {
                if (e.getMessage() == null || !e.getMessage().startsWith("CONFLICT")) throw e;
                conflicts.incrementAndGet();
              }
            }
          }
        }
      });
      eq(r.get(key), String.valueOf(workers * per), "counter (" + conflicts.get() + " conflicts retried)");
    });

    feature("strings", () -> {
      eq(r.set(P + "s:a", "hello", SetArgs.Builder.ex(100)), "OK", "SET EX");
      long ttl = r.ttl(P + "s:a");
      check(ttl > 0 && ttl <= 100, "TTL " + ttl);
      eq(r.setnx(P + "s:a", "x"), false, "SETNX on an existing key");
      eq(r.append(P + "s:a", " world"), 11L, "APPEND");
      eq(r.getrange(P + "s:a", 0, 4), "hello", "GETRANGE");
      // BITFIELD: small counters packed in one string, read back.
      BitFieldArgs bf = BitFieldArgs.Builder.set(BitFieldArgs.unsigned(8), BitFieldArgs.typeWidthBasedOffset(1), 200)
          .overflow(BitFieldArgs.OverflowType.SAT)
          .incrBy(BitFieldArgs.unsigned(8), BitFieldArgs.typeWidthBasedOffset(1), 100)
          .overflow(BitFieldArgs.OverflowType.WRAP)
          .incrBy(BitFieldArgs.signed(4), 0, 9);
      eq(r.bitfield(P + "s:bf", bf), java.util.Arrays.asList(0L, 255L, -7L), "BITFIELD");
      eq(r.bitfield(P + "s:bf", BitFieldArgs.Builder.get(BitFieldArgs.unsigned(8), 8).get(BitFieldArgs.signed(4), 0)),
          java.util.Arrays.asList(255L, -7L), "BITFIELD GET");
      r.set(P + "s:ms", "v", SetArgs.Builder.px(150));
      r.mset(Map.of(P + "s:m1", "1", P + "s:m2", "2"));
      eq(values(r.mget(P + "s:m1", P + "s:m2", P + "s:none")), java.util.Arrays.asList("1", "2", null), "MGET");
      eq(r.persist(P + "s:a"), true, "PERSIST");
      eq(r.ttl(P + "s:a"), -1L, "TTL after PERSIST");
      eq(r.getdel(P + "s:m1"), "1", "GETDEL");
      Thread.sleep(300);
      eq(r.get(P + "s:ms"), null, "expired PX key");
    });

    feature("hashes", () -> {
      String h = P + "h";
      eq(r.hset(h, Map.of("name", "ada", "lang", "java", "n", "1")), 3L, "HSET");
      eq(r.hget(h, "name"), "ada", "HGET");
      eq(r.hgetall(h), Map.of("name", "ada", "lang", "java", "n", "1"), "HGETALL");
      eq(r.hdel(h, "lang"), 1L, "HDEL");
      eq(r.hlen(h), 2L, "HLEN");
      eq(values(r.hmget(h, "name", "nope")), java.util.Arrays.asList("ada", null), "HMGET");
    });

    feature("sets", () -> {
      String s = P + "set:s", t = P + "set:t";
      eq(r.sadd(s, "a", "b", "c"), 3L, "SADD");
      eq(r.sismember(s, "b"), true, "SISMEMBER");
      eq(r.smembers(s), Set.of("a", "b", "c"), "SMEMBERS");
      r.sadd(t, "b", "c", "d");
      eq(r.sinter(s, t), Set.of("b", "c"), "SINTER");
      eq(r.srem(s, "a"), 1L, "SREM");
      eq(r.scard(s), 2L, "SCARD");
    });

    feature("zsets", () -> {
      String z = P + "z";
      eq(r.zadd(z, ScoredValue.just(1, "a"), ScoredValue.just(2, "b"), ScoredValue.just(3, "c")), 3L, "ZADD");
      eq(r.zrangeWithScores(z, 0, -1), List.of(ScoredValue.just(1, "a"), ScoredValue.just(2, "b"), ScoredValue.just(3, "c")), "ZRANGE WITHSCORES");
      eq(r.zincrby(z, 5, "a"), 6.0, "ZINCRBY");
      eq(r.zrank(z, "a"), 2L, "ZRANK");
      eq(r.zrangebyscore(z, Range.create(2, 3)), List.of("b", "c"), "ZRANGEBYSCORE");
      eq(r.zrem(z, "b"), 1L, "ZREM");
      eq(r.zcard(z), 2L, "ZCARD");
    });

    feature("lists", () -> {
      String q = P + "list";
      eq(r.rpush(q, "a", "b", "c"), 3L, "RPUSH");
      eq(r.lpush(q, "z"), 4L, "LPUSH");
      eq(r.lrange(q, 0, -1), List.of("z", "a", "b", "c"), "LRANGE");
      eq(r.lpop(q), "z", "LPOP");
      eq(r.rpop(q), "c", "RPOP");
      eq(r.llen(q), 2L, "LLEN");
      String bq = P + "list:blocking";
      try (StatefulRedisConnection<String, String> c = client.connect()) { // a blocking pop holds its connection
        long t0 = System.nanoTime();
        RedisFuture<KeyValue<String, String>> popped = c.async().blpop(5, bq);
        Thread.sleep(300);
        r.rpush(bq, "job-1");
        eq(popped.get(5, TimeUnit.SECONDS), KeyValue.just(bq, "job-1"), "BLPOP");
        check(System.nanoTime() - t0 < 4_000_000_000L, "BLPOP woke late");
        eq(c.sync().blpop(0.2, bq), null, "BLPOP timeout on an empty list");
      }
    });

    feature("counters", () -> {
      String c = P + "ctr";
      eq(r.incrby(c, 10), 10L, "INCRBY");
      eq(r.decrby(c, 3), 7L, "DECRBY");
      eq(r.incrbyfloat(c, 0.5), 7.5, "INCRBYFLOAT");
      eq(r.hincrby(P + "ctr:h", "f", 4), 4L, "HINCRBY");
      eq(r.hincrby(P + "ctr:h", "f", -1), 3L, "HINCRBY");
    });

    feature("scan", () -> {
      Map<String, String> many = new java.util.HashMap<>();
      for (int i = 0; i < 300; i++) many.put(P + "scan:" + i, String.valueOf(i));
      r.mset(many);
      Set<String> seen = new HashSet<>();
      ScanIterator<String> it = ScanIterator.scan(r, ScanArgs.Builder.matches(P + "scan:*").limit(50));
      while (it.hasNext()) seen.add(it.next());
      eq(seen.size(), 300, "keys SCAN found");
    });

    feature("pubsub", () -> {
      String ch = P + "chan";
      List<String> got = new CopyOnWriteArrayList<>();
      try (StatefulRedisPubSubConnection<String, String> ps = client.connectPubSub()) {
        ps.addListener(new RedisPubSubAdapter<>() {
          @Override public void message(String channel, String message) { got.add("message|" + channel + "|" + message); }
          @Override public void message(String pattern, String channel, String message) { got.add("pmessage|" + channel + "|" + message); }
        });
        ps.sync().subscribe(ch);
        ps.sync().psubscribe(P + "pat.*");
        eq(r.publish(ch, "hello"), 1L, "PUBLISH receivers");
        eq(r.publish(P + "pat.x", "world"), 1L, "PUBLISH receivers (pattern)");
        for (int i = 0; i < 60 && got.size() < 2; i++) Thread.sleep(50);
        eq(got, List.of("message|" + ch + "|hello", "pmessage|" + P + "pat.x|world"), "messages");
        ps.sync().unsubscribe(ch);
        ps.sync().punsubscribe();
        eq(r.publish(ch, "nobody"), 0L, "PUBLISH after UNSUBSCRIBE");
      }
    });

    feature("lua", () -> {
      String script = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
      String[] keys = {P + "lua:n"};
      Long a = r.eval(script, ScriptOutputType.INTEGER, keys, "5");
      eq(a, 5L, "EVAL");
      String sha = r.scriptLoad(script);
      eq(sha, r.digest(script), "SCRIPT LOAD's SHA1");
      Long b = r.evalsha(sha, ScriptOutputType.INTEGER, keys, "5");
      eq(b, 10L, "EVALSHA");
    });

    feature("select", () -> {
      RedisClient c1 = newClient(1, PASSWORD);
      try (StatefulRedisConnection<String, String> db1 = c1.connect()) {
        String k = P + "db";
        db1.sync().set(k, "in-db1");
        eq(db1.sync().get(k), "in-db1", "GET in db 1");
        eq(r.get(k), null, "db 0 sees db 1's key");
        db1.sync().del(k);
      } finally {
        c1.shutdown(Duration.ZERO, Duration.ZERO);
      }
    });

    feature("cache", () -> {
      Map<String, String> store = new ConcurrentHashMap<>();
      try (StatefulRedisConnection<String, String> c = client.connect()) { // RESP3 (HELLO 3)
        CacheFrontend<String, String> cache = ClientSideCaching.enable(CacheAccessor.forMap(store), c, TrackingArgs.Builder.enabled());
        String k = P + "cached";
        r.set(k, "v1");
        eq(cache.get(k), "v1", "GET");
        eq(cache.get(k), "v1", "GET again");
        eq(store.get(k), "v1", "the cached entry");
        r.set(k, "v2"); // the server's invalidation must evict the entry
        for (int i = 0; i < 60 && store.containsKey(k); i++) Thread.sleep(50);
        check(!store.containsKey(k), "the entry was not invalidated");
        eq(cache.get(k), "v2", "value after invalidation");
        cache.close();
      }
    });

    feature("reconnect", () -> {
      if (RESTART_CMD.isEmpty()) throw new Skip("no RESTART_CMD");
      String k = P + "restart";
      r.set(k, "before");
      restart();
      long deadline = System.nanoTime() + 20_000_000_000L;
      int errors = 0;
      String last = "";
      while (true) {
        try {
          r.set(k + ":after", "after");
          break;
        } catch (RedisException e) {
          errors++;
          last = String.valueOf(e.getMessage());
          if (System.nanoTime() > deadline) throw e;
          Thread.sleep(200);
        }
      }
      System.out.println("INFO reconnect: " + errors + " errors reached the application before it worked again " + last);
      eq(r.get(k + ":after"), "after", "GET after the restart");
      eq(r.clientGetname(), NAME + "-app", "client name after reconnect");
      if (TARGET.equals("elsa")) eq(r.get(k), "before", "a key written before the restart");
      parallel(10, i -> r.incr(P + "restart:n"));
    });

    int rc = summary(NAME);
    System.exit(rc);
  }
}
