"""Forms of the dashboard: they parse and validate input; services do the work."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from inventory.models import Pool


class QuotaForm(forms.Form):
    guaranteed = forms.IntegerField(min_value=0, max_value=10**6, label="Guaranteed")
    limit = forms.IntegerField(min_value=0, max_value=10**6, required=False, label="Limit",
                               help_text="Empty: may borrow every idle GPU of the pool.")
    lending_limit = forms.IntegerField(min_value=0, max_value=10**6, required=False, label="Lends",
                                       help_text="Of the guarantee, what other teams may borrow "
                                                 "while it is idle. Empty: all of it.")

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        guaranteed, limit = data.get("guaranteed"), data.get("limit")
        lending = data.get("lending_limit")
        if guaranteed is not None and limit is not None and limit < guaranteed:
            raise forms.ValidationError(
                f"Limit {limit} is below guaranteed {guaranteed}: the team could never reach its "
                "guarantee. Raise the limit or lower the guarantee.", code="invalid_quota")
        if guaranteed is not None and lending is not None and lending > guaranteed:
            self.add_error("lending_limit", forms.ValidationError(
                f"Lending limit {lending} is above guaranteed {guaranteed}: a team lends at most "
                "its guarantee. Lower the lending limit or raise the guarantee.",
                code="invalid_quota"))
        return data


class WeightForm(forms.Form):
    weight = forms.FloatField(min_value=0.01, max_value=10**4, label="Weight")


class RenewForm(forms.Form):
    ttl_seconds = forms.IntegerField(min_value=60, required=False, label="New TTL (seconds)",
                                     help_text="Empty: the lease's current TTL.")


class ReleaseForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False, label="Reason (optional)")


class CapacityForm(forms.Form):
    pool = forms.ModelChoiceField(queryset=Pool.objects.order_by("name"), to_field_name="name",
                                  label="Target pool", empty_label="Choose a pool…")
    mode = forms.ChoiceField(choices=[
        ("keep", "Keep running leases: cordon their hosts until they end"),
        ("drain", "Preempt running leases: drain their hosts (with notice)"),
    ], initial="keep", widget=forms.RadioSelect, label="Leases on moved hosts")
    hosts = forms.TypedMultipleChoiceField(coerce=int, required=False)
    gpus = forms.TypedMultipleChoiceField(coerce=int, required=False)
    fingerprint = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, host_ids: list[int], gpu_ids: list[int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["hosts"]).choices = [(h, h) for h in host_ids]
        cast(forms.ChoiceField, self.fields["gpus"]).choices = [(g, g) for g in gpu_ids]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if not data.get("hosts") and not data.get("gpus"):
            raise forms.ValidationError("Pick at least one host or GPU to move.", code="empty")
        return data


class UsageForm(forms.Form):
    """The usage page's window (whole UTC days, both ends included) and filters."""

    team = forms.ChoiceField(required=False)
    pool = forms.ChoiceField(required=False)
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))
    group_by = forms.ChoiceField(required=False, label="Table by",
                                 choices=[("team", "Team"), ("pool", "Pool"), ("model", "Model"),
                                          ("user", "User"), ("day", "Day")])

    def __init__(self, *args: Any, teams: list[str], pools: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["team"]).choices = [("", "All teams"), *((t, t) for t in teams)]
        cast(forms.ChoiceField, self.fields["pool"]).choices = [("", "Any pool"), *((p, p) for p in pools)]
