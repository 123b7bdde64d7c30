from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from inventory.selectors import pool_list


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/overview.html", {"pools": pool_list()})
