package main

// sarama 1.22: ListTopics, DescribeConfig and ListAcls (admin), a SyncProducer, a consumer group
// that consumes what was produced and commits it with sarama's default OffsetCommit v1,
// and the commit read back (OffsetFetch).

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/Shopify/sarama"
)

type handler struct {
	want int
	seen int
	done chan struct{}
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		s.MarkMessage(m, "")
		h.seen++
		if h.seen == h.want {
			close(h.done)
		}
	}
	return nil
}

func runSarama(addrs []string, topic, group string, count int) map[string]interface{} {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V0_10_2_0 // the lowest sarama's consumer groups accept
	cfg.Producer.Return.Successes = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Return.Errors = true
	out := map[string]interface{}{}

	adminCfg := sarama.NewConfig()
	adminCfg.Version = sarama.V1_0_0_0 // sarama sends DescribeConfigs only from Kafka 0.11 on
	admin, err := sarama.NewClusterAdmin(addrs, adminCfg)
	if err != nil {
		fail("cluster admin", err)
	}
	topics, err := admin.ListTopics()
	if err != nil {
		fail("ListTopics", err)
	}
	partitions := map[string]int32{}
	for name, detail := range topics {
		partitions[name] = detail.NumPartitions
	}
	out["topics"] = partitions
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		fail("DescribeConfig", err)
	}
	configs := map[string]string{}
	for _, e := range entries {
		configs[e.Name] = e.Value
	}
	out["configs"] = configs
	// DescribeAcls v0 (sarama does not look at the answer's error code: a body it could
	// not decode is the failure to catch)
	filter := sarama.AclFilter{
		ResourceType:   sarama.AclResourceAny,
		Operation:      sarama.AclOperationAny,
		PermissionType: sarama.AclPermissionAny,
	}
	acls, err := admin.ListAcls(filter)
	if err != nil {
		fail("ListAcls", err)
	}
	out["acls"] = len(acls)

	producer, err := sarama.NewSyncProducer(addrs, cfg)
	if err != nil {
		fail("producer", err)
	}
	for i := 0; i < count; i++ {
		msg := &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("v%d", i))}
		if _, _, err := producer.SendMessage(msg); err != nil {
			fail("SendMessage", err)
		}
	}
	producer.Close()

	consumers, err := sarama.NewConsumerGroup(addrs, group, cfg)
	if err != nil {
		fail("consumer group", err)
	}
	go func() {
		for err := range consumers.Errors() {
			fmt.Fprintf(os.Stderr, "consumer group error: %v\n", err)
		}
	}()
	h := &handler{want: count, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	go func() {
		for ctx.Err() == nil {
			if err := consumers.Consume(ctx, []string{topic}, h); err != nil {
				fmt.Fprintf(os.Stderr, "Consume: %v\n", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		fail("consuming", fmt.Errorf("%d of %d records in 60 s", h.seen, count))
	}
	cancel()
	if err := consumers.Close(); err != nil { // the session's end flushes the marked offsets
		fail("consumer group close", err)
	}
	out["consumed"] = h.seen

	fetched, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0}})
	if err != nil {
		fail("ListConsumerGroupOffsets", err)
	}
	block := fetched.GetBlock(topic, 0)
	if block == nil {
		fail("ListConsumerGroupOffsets", fmt.Errorf("no answer for %s/0", topic))
	}
	out["committed"] = block.Offset
	admin.Close()
	return out
}
