// kafkago_check runs Debian's kafka-go 0.2 against a broker's Kafka listener: a Writer
// produces records (Produce v2) and a Reader of partition 0 fetches them (Fetch v2),
// printing the values read as a JSON list (tests/kafka/test_compat_go.py reads it).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap HOST:PORT list, comma-separated")
	topic := flag.String("topic", "", "an existing topic of one partition")
	count := flag.Int("count", 5, "records to produce and fetch")
	flag.Parse()
	addrs := strings.Split(*brokers, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	writer := kafka.NewWriter(kafka.WriterConfig{Brokers: addrs, Topic: *topic})
	messages := make([]kafka.Message, *count)
	for i := range messages {
		messages[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("go-%d", i))}
	}
	if err := writer.WriteMessages(ctx, messages...); err != nil {
		fail("WriteMessages", err)
	}
	writer.Close()

	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, Topic: *topic, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20})
	values := []string{}
	for len(values) < *count {
		m, err := reader.ReadMessage(ctx)
		if err != nil {
			fail("ReadMessage", err)
		}
		values = append(values, string(m.Value))
	}
	reader.Close()
	if err := json.NewEncoder(os.Stdout).Encode(values); err != nil {
		fail("output", err)
	}
}
