// A JVM service with a garbage collector's rhythm, for the "jvm-gc" trace:
// a request loop at a steady rate (each request allocates short-lived
// garbage and does a little work) with a session cache whose evicted
// entries have already been promoted, so the old generation fills and the
// parallel collector runs a full collection every so often (all GC threads
// busy for a few hundred ms) besides the frequent young collections. Run
// with: java -Xms1g -Xmx1g -Xmn128m -XX:+UseParallelGC gc.java SECONDS
import java.security.MessageDigest;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;

public class gc {
    static final int CACHE_ENTRIES = 2000;       // ~400 MB live at 200 KB each
    static final int REQUESTS_PER_SECOND = 400;

    public static void main(String[] args) throws Exception {
        long stop = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        Random rng = new Random(7);
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        Map<Integer, byte[][]> cache = new LinkedHashMap<>(CACHE_ENTRIES, 0.75f, true) {
            protected boolean removeEldestEntry(Map.Entry<Integer, byte[][]> e) { return size() > CACHE_ENTRIES; }
        };
        long sink = 0, next = System.nanoTime();
        while (System.nanoTime() < stop) {
            // Garbage of a request (parsed bodies, buffers) and the work on
            // it: fill and digest 128 KiB.
            byte[][] garbage = new byte[64][];
            for (int i = 0; i < garbage.length; i++) {
                garbage[i] = new byte[1024 + rng.nextInt(2048)];
                rng.nextBytes(garbage[i]);
                sha.update(garbage[i]);
            }
            sink += sha.digest()[0];
            // One request in three opens a session that the cache keeps.
            if (rng.nextInt(3) == 0) {
                byte[][] session = new byte[50][];
                for (int i = 0; i < session.length; i++) session[i] = new byte[4096];
                cache.put(rng.nextInt(1 << 20), session);
            }
            next += 1_000_000_000L / REQUESTS_PER_SECOND;
            long sleep = next - System.nanoTime();
            if (sleep > 0) Thread.sleep(sleep / 1_000_000, (int) (sleep % 1_000_000));
        }
        System.out.println(sink);
    }
}
