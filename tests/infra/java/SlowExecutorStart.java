package coxswain.test;

import java.util.Map;

import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * An executor slow to start, for tests: Spark initialises executor plugins after the
 * executor's block manager has registered with the driver and before the executor tells
 * the driver it takes tasks (as while it fetches the application's jars on a busy host).
 * Sleeps COXSWAIN_TEST_EXECUTOR_START_DELAY_S seconds there when the executor's
 * environment sets it (the Spark worker that launched it had it); nothing otherwise.
 */
public class SlowExecutorStart implements SparkPlugin {
  @Override
  public DriverPlugin driverPlugin() {
    return null;
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void init(PluginContext ctx, Map<String, String> extraConf) {
        String delay = System.getenv("COXSWAIN_TEST_EXECUTOR_START_DELAY_S");
        if (delay == null) {
          return;
        }
        try {
          Thread.sleep((long) (Double.parseDouble(delay) * 1000));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
    };
  }
}
