package main

// kafka-go 0.2: a Writer produces records (Produce v2) and a Reader of partition 0
// fetches them (Fetch v2); the values read are the answer.

import (
	"context"
	"fmt"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func runKafkaGo(addrs []string, topic string, count int) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	writer := kafka.NewWriter(kafka.WriterConfig{Brokers: addrs, Topic: topic})
	messages := make([]kafka.Message, count)
	for i := range messages {
		messages[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("go-%d", i))}
	}
	if err := writer.WriteMessages(ctx, messages...); err != nil {
		fail("WriteMessages", err)
	}
	writer.Close()

	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, Topic: topic, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20})
	values := []string{}
	for len(values) < count {
		m, err := reader.ReadMessage(ctx)
		if err != nil {
			fail("ReadMessage", err)
		}
		values = append(values, string(m.Value))
	}
	reader.Close()
	return values
}
