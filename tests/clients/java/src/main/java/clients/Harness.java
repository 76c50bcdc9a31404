package clients;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/** Shared by JedisApp and LettuceApp: env, assertions, PASS/FAIL lines. */
final class Harness {
  static final String TARGET = env("TARGET", "redis");
  static final String HOST = env("HOST", "127.0.0.1");
  static final int PORT = Integer.parseInt(env("PORT", "6379"));
  static final String PASSWORD = env("PASSWORD", "");
  static final String RESTART_CMD = env("RESTART_CMD", "");
  private static final Map<String, Integer> results = new TreeMap<>();

  static String env(String k, String d) {
    String v = System.getenv(k);
    return v == null || v.isEmpty() ? d : v;
  }

  static String prefix(String name) {
    return name + ":" + UUID.randomUUID().toString().substring(0, 8) + ":";
  }

  static final class Skip extends RuntimeException {
    Skip(String why) { super(why); }
  }

  interface Body { void run() throws Exception; }
  interface Worker { void run(int i) throws Exception; }

  static void check(boolean cond, String what) {
    if (!cond) throw new AssertionError(what);
  }

  static void eq(Object got, Object want, String what) {
    if (!Objects.equals(got, want)) throw new AssertionError(what + " got " + got + ", want " + want);
  }

  static void feature(String name, Body body) {
    ExecutorService ex = Executors.newSingleThreadExecutor(r -> { Thread t = new Thread(r); t.setDaemon(true); return t; });
    Future<?> f = ex.submit(() -> { body.run(); return null; });
    String verdict;
    try {
      f.get(60, TimeUnit.SECONDS);
      verdict = "PASS";
      System.out.println("PASS " + name);
    } catch (java.util.concurrent.TimeoutException e) {
      f.cancel(true);
      verdict = "FAIL";
      System.out.println("FAIL " + name + ": timed out after 60 s");
    } catch (Exception e) {
      Throwable c = e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
      if (c instanceof Skip) {
        verdict = "SKIP";
        System.out.println("SKIP " + name + ": " + c.getMessage());
      } else {
        verdict = "FAIL";
        String msg = (c.getClass().getSimpleName() + ": " + c.getMessage()).replace('\n', ' ');
        System.out.println("FAIL " + name + ": " + (msg.length() > 300 ? msg.substring(0, 300) : msg));
      }
    } finally {
      ex.shutdownNow();
    }
    System.out.flush();
    results.merge(verdict, 1, Integer::sum);
  }

  /** n threads, each running w(i); the first failure is rethrown. */
  static void parallel(int n, Worker w) throws Exception {
    ExecutorService ex = Executors.newFixedThreadPool(n);
    List<Future<?>> fs = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      int id = i;
      fs.add(ex.submit(() -> { w.run(id); return null; }));
    }
    try {
      for (Future<?> f : fs) {
        try {
          f.get();
        } catch (java.util.concurrent.ExecutionException e) {
          if (e.getCause() instanceof Exception ce) throw ce;
          throw new RuntimeException(e.getCause());
        }
      }
    } finally {
      ex.shutdownNow();
    }
  }

  static void restart() throws Exception {
    Process p = new ProcessBuilder("sh", "-c", RESTART_CMD).inheritIO().start();
    eq(p.waitFor(), 0, "restart command exit code");
  }

  static int summary(String name) {
    int pass = results.getOrDefault("PASS", 0), fail = results.getOrDefault("FAIL", 0), skip = results.getOrDefault("SKIP", 0);
    System.out.printf("SUMMARY %s %s: %d passed, %d failed, %d skipped%n", name, TARGET, pass, fail, skip);
    return fail > 0 ? 1 : 0;
  }
}
