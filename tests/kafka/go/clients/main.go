// clients runs Debian's Go Kafka clients against a broker's Kafka listener and prints
// what they saw as JSON (tests/kafka/test_compat_go.py reads it):
//
//	clients sarama -brokers B -topic T -group G   (sarama 1.22: sarama.go)
//	clients kafka-go -brokers B -topic T          (kafka-go 0.2: kafkago.go)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail("usage", fmt.Errorf("clients sarama|kafka-go -brokers HOST:PORT -topic T [-group G]"))
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	brokers := flags.String("brokers", "", "bootstrap HOST:PORT list, comma-separated")
	topic := flags.String("topic", "", "an existing topic of one partition")
	group := flags.String("group", "", "the consumer group (sarama)")
	count := flags.Int("count", 5, "records to produce and consume")
	flags.Parse(os.Args[2:])
	addrs := strings.Split(*brokers, ",")
	var out interface{}
	switch os.Args[1] {
	case "sarama":
		out = runSarama(addrs, *topic, *group, *count)
	case "kafka-go":
		out = runKafkaGo(addrs, *topic, *count)
	default:
		fail("usage", fmt.Errorf("unknown client %q; accepted: sarama, kafka-go", os.Args[1]))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("output", err)
	}
}
