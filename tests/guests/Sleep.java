// A JVM that says it is up (/tmp/jvm-ready), then waits to be looked at (tests/guests/arm64_lab.py).
public class Sleep {
    public static void main(String[] args) throws Exception {
        java.nio.file.Files.writeString(java.nio.file.Path.of("/tmp/jvm-ready"), "ready");
        Thread.sleep(3_600_000L);
    }
}
