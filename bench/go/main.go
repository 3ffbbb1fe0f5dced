// asynqbench: the asynq peer of `make bench`, a worker and a producer in one binary.
//
//	asynqbench worker     # an asynq server at its defaults running the reference task
//	asynqbench producer   # commands on stdin, one a line, as bench/systems/external.py sends
//	                      # (and "rtt N": N RPUSH round trips through go-redis, bench/floors.py)
//	asynqbench version    # the asynq version it was built with
//
// The reference task does exactly one Redis write, RPUSH bench:done <pid>, through one
// go-redis client per process (asynq's own client library). BENCH_REDIS_URL names Redis.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const doneKey = "bench:done"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: asynqbench worker|producer|version")
		os.Exit(2)
	}
	url := os.Getenv("BENCH_REDIS_URL")
	var err error
	switch os.Args[1] {
	case "worker":
		err = worker(url)
	case "producer":
		err = producer(url)
	case "version":
		fmt.Println(version())
	default:
		fmt.Fprintln(os.Stderr, "usage: asynqbench worker|producer|version")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "asynqbench:", err)
		os.Exit(1)
	}
}

func version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/hibiken/asynq" {
				return strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
	return "?"
}

func worker(url string) error {
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		return err
	}
	ropt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	pid := strconv.Itoa(os.Getpid())
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(ctx context.Context, _ *asynq.Task) error {
		return rdb.RPush(ctx, doneKey, pid).Err()
	})
	// Defaults: concurrency = the number of CPUs, the "default" queue; Run stops on SIGTERM.
	return asynq.NewServer(opt, asynq.Config{}).Run(mux)
}

func producer(url string) error {
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		return err
	}
	client := asynq.NewClient(opt)
	defer client.Close()
	ropt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()
	one := func() error {
		_, err := client.Enqueue(asynq.NewTask("noop", nil))
		return err
	}
	run := func(fields []string) (string, error) {
		arg := func(i int) int {
			if i < len(fields) {
				n, _ := strconv.Atoi(fields[i])
				return n
			}
			return 0
		}
		switch fields[0] {
		case "single", "batch": // asynq has no batch API: one Enqueue per task
			for i := 0; i < arg(1); i++ {
				if err := one(); err != nil {
					return "", err
				}
			}
		case "one":
			return "ok", one()
		case "rtt": // the floor of one round trip from Go: N sequential RPUSHes
			for i := 0; i < arg(1); i++ {
				if err := rdb.RPush(context.Background(), "bench:rtt", 1).Err(); err != nil {
					return "", err
				}
			}
		case "purge":
			for _, del := range []func(string) (int, error){
				inspector.DeleteAllPendingTasks, inspector.DeleteAllRetryTasks,
				inspector.DeleteAllArchivedTasks, inspector.DeleteAllCompletedTasks,
			} {
				if _, err := del("default"); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
					return "", err
				}
			}
		case "version":
			return "ok " + version(), nil
		default:
			return "", fmt.Errorf("unknown command %q", fields[0])
		}
		return "ok", nil
	}
	scanner := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "quit" {
			break
		}
		reply, err := run(fields)
		if err != nil {
			reply = "error " + strings.Join(strings.Fields(err.Error()), " ")
		}
		fmt.Fprintln(out, reply)
		out.Flush()
	}
	return scanner.Err()
}
