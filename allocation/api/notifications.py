"""Notifications by API: a user's own subscriptions (what `gpupool notify` calls) and the delivery
log (admins: every delivery; others: those of their own subscriptions). Views translate; the rules
are allocation.notify.subscriptions'."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.api.serializers import StrictSerializer
from allocation.filtersets import NotificationDeliveryFilterSet
from allocation.models import Notification, NotificationDelivery
from allocation.notify.subscriptions import subscription_delete, subscription_put
from allocation.notify_vocabulary import EVENTS, KINDS
from core.api.permissions import is_pool_admin
from core.api.viewsets import ReadOnlyViewSet


class SubscriptionInputSerializer(StrictSerializer):
    name = serializers.SlugField(max_length=64, default="default",
                                 help_text="Your name for it; sending the same name again replaces it.")
    kind = serializers.ChoiceField(choices=KINDS, help_text="webhook (JSON POST) or email.")
    url = serializers.CharField(required=False, max_length=2000, help_text="Webhook: the http(s) URL to POST to.")
    to = serializers.ListField(child=serializers.EmailField(), required=False, max_length=10,
                               help_text="E-mail: recipients; default and only choice (admins excepted): "
                                         "your own address.")
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENTS), min_length=1,
                                   help_text="Events to hear of: " + ", ".join(EVENTS) + ".")
    secret = serializers.CharField(required=False, write_only=True, min_length=16, max_length=256,
                                   help_text="Webhook: key of the HMAC-SHA256 signature (X-Gpupool-Signature); "
                                             "never shown again.")
    granted_after_s = serializers.FloatField(required=False, min_value=0, max_value=2592000,
                                             help_text="lease.granted only after a wait longer than this "
                                                       "(default 60).")
    expiring_before_s = serializers.FloatField(required=False, min_value=0, max_value=2592000,
                                               help_text="lease.expiring this long before expiry (default 600).")


class SubscriptionSerializer(serializers.ModelSerializer[Any]):
    signed = serializers.BooleanField(read_only=True, help_text="Whether a secret signs its webhook bodies.")

    class Meta:
        model = Notification
        fields = ["id", "name", "kind", "url", "to", "events", "signed", "granted_after_s", "expiring_before_s",
                  "enabled", "disabled_reason", "created_at"]
        read_only_fields = fields
        extra_kwargs = {
            "id": {"help_text": "Subscription id."}, "name": {"help_text": "Its name (unique per user)."},
            "kind": {"help_text": "webhook or email."}, "url": {"help_text": "Webhook URL; empty for e-mail."},
            "to": {"help_text": "E-mail recipients; empty for a webhook."},
            "events": {"help_text": "Events it hears of."},
            "granted_after_s": {"help_text": "lease.granted only after a wait longer than this."},
            "expiring_before_s": {"help_text": "lease.expiring this long before expiry."},
            "enabled": {"help_text": "False once its receiver answered 410 Gone: send it again to enable it."},
            "disabled_reason": {"help_text": "Why it was disabled."},
            "created_at": {"help_text": "When it was made."},
        }


@extend_schema_view(
    list=extend_schema(summary="List your notification subscriptions"),
    retrieve=extend_schema(summary="Read one of your notification subscriptions"),
    destroy=extend_schema(summary="Remove one of your notification subscriptions",
                          description="Its delivery log stays. Another user's is a 404."),
)
class SubscriptionViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, ReadOnlyViewSet):
    serializer_class = SubscriptionSerializer

    def get_queryset(self) -> QuerySet[Notification]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Notification.objects.none()
        return Notification.objects.filter(user_id=self.request.user.pk or 0).order_by("name")

    @extend_schema(summary="Subscribe to notifications of your leases", request=SubscriptionInputSerializer,
                   responses={201: SubscriptionSerializer, 200: SubscriptionSerializer},
                   description="Your own leases' events (granted after a wait, expiring, preempted, lost, idle) "
                               "and your teams' budget warnings, as a signed webhook or an e-mail to your own "
                               "address. 201 when new; 200 when it replaced your subscription of that name "
                               "(the same request twice is harmless). 400 names the field; 403 "
                               "`not_your_address` for e-mail to another address.")
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = SubscriptionInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        subscription, created = subscription_put(user=request.user, **body.validated_data)
        return Response(SubscriptionSerializer(subscription).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def perform_destroy(self, instance: Notification) -> None:
        subscription_delete(subscription=instance)


class DeliverySerializer(serializers.ModelSerializer[Any]):
    class Meta:
        model = NotificationDelivery
        fields = ["id", "target", "kind", "event", "event_key", "lease_id", "team", "pool", "state", "attempts",
                  "next_attempt_at", "last_status", "last_error", "occurred_at", "created_at", "delivered_at",
                  "payload"]
        read_only_fields = fields
        extra_kwargs = {
            "id": {"help_text": "Delivery id: the X-Gpupool-Delivery header, the same on every attempt."},
            "target": {"help_text": "The target (user/name for a subscription)."},
            "kind": {"help_text": "webhook or email."}, "event": {"help_text": "Event name."},
            "event_key": {"help_text": "The event's id (the body's event_id), shared by its deliveries."},
            "lease_id": {"help_text": "The lease it is about; null for a budget."},
            "team": {"help_text": "Team name."}, "pool": {"help_text": "Pool name; empty for an all-pools budget."},
            "state": {"help_text": "pending, delivered or failed (given up)."},
            "attempts": {"help_text": "Attempts so far."},
            "next_attempt_at": {"help_text": "When a pending one is tried next."},
            "last_status": {"help_text": "HTTP status of the last attempt (null: no answer, or e-mail)."},
            "last_error": {"help_text": "Why the last attempt failed."},
            "occurred_at": {"help_text": "When the event was committed."},
            "created_at": {"help_text": "When the delivery was derived."},
            "delivered_at": {"help_text": "When the receiver took it."},
            "payload": {"help_text": "The JSON body sent."},
        }


@extend_schema_view(
    list=extend_schema(summary="List notification deliveries",
                       description="Newest first. Admins: every delivery; others: those of their own "
                                   "subscriptions."),
    retrieve=extend_schema(summary="Read a notification delivery"),
)
class DeliveryViewSet(ReadOnlyViewSet):
    serializer_class = DeliverySerializer
    filterset_class = NotificationDeliveryFilterSet

    def get_queryset(self) -> QuerySet[NotificationDelivery]:
        if getattr(self, "swagger_fake_view", False):
            return NotificationDelivery.objects.none()
        rows = NotificationDelivery.objects.order_by("-created_at", "id")
        if is_pool_admin(self.request.user):
            return rows
        return rows.filter(notification__user_id=self.request.user.pk or 0)
